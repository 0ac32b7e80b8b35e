"""The contract every provider (simulated, AWS, GCP) implements.

Providers translate SDK errors into `costguard.errors.ProviderError` at this boundary:
nothing above a provider ever sees a botocore or google-api-core exception. A scope
(account/project x region) that cannot be read is reported as a `Gap`, not raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from costguard.model import ActionResult, GpuMinute, Instance, Inventory, PriceQuote, ProviderName


@runtime_checkable
class Provider(Protocol):
    name: ProviderName

    def list_instances(self) -> Inventory:
        """Every instance in every configured scope; unreadable scopes become gaps."""
        ...

    def gpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> list[GpuMinute]:
        """Per-GPU per-minute readings from the cloud's own metrics service, batched.

        Returns only what the cloud has; an instance without metrics simply has no rows
        ("no data" is never "idle").
        """
        ...

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        """Stop `instance` if it is still as last seen (running); verify the state after."""
        ...

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        """Start a stopped `instance`."""
        ...

    def set_tags(
        self,
        instance: Instance,
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> ActionResult:
        """Add/overwrite `tags` and delete the keys in `remove` (labels on GCP)."""
        ...

    def price(self, instance: Instance) -> PriceQuote | None:
        """Hourly price of `instance` as it runs now (spot or on-demand), if known."""
        ...
