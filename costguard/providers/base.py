"""The contract every provider (simulated, AWS, GCP) implements.

Providers translate SDK errors into `costguard.errors.ProviderError` at this boundary:
nothing above a provider ever sees a botocore or google-api-core exception. A scope
(account/project x region) that cannot be read is reported as a `Gap`, not raised.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from costguard.minute_rows import MinuteRows
from costguard.model import (
    ActionResult,
    Gap,
    GpuMinute,
    Instance,
    Inventory,
    PriceQuote,
    ProviderName,
)

if TYPE_CHECKING:
    from costguard.providers.repeats import Receipt


# How a person writes one of costguard's tags (`costguard:snooze-until`) on a provider's
# resources where they are not tags: each such provider registers its spelling here (k8s:
# an annotation). Others take "tag KEY".
TAG_SPELLINGS: dict[str, Callable[[str], str]] = {}


def spelled_tag(provider: str, key: str) -> str:
    """`key` as a person sets it on one of `provider`'s resources ("tag costguard:..."
    or, on a Kubernetes workload, "annotation costguard.io/...")."""
    spell = TAG_SPELLINGS.get(provider)
    return spell(key) if spell is not None else f"tag {key}"


def tag_detail(tags: Mapping[str, str], remove: Sequence[str] = ()) -> str:
    """What a tag action did, as the journal says it: `set k=v, k2=v2; removed k3` (a
    Python dict's repr was journaled and shown by explain and audit)."""
    parts = []
    if tags:
        parts.append("set " + ", ".join(f"{k}={v}" for k, v in tags.items()))
    if remove:
        parts.append("removed " + ", ".join(remove))
    return "; ".join(parts) or "nothing to change"


@runtime_checkable
class Provider(Protocol):
    name: ProviderName

    def list_instances(self) -> Inventory:
        """Every instance in every configured scope; unreadable scopes become gaps."""
        ...

    def gpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> Sequence[GpuMinute]:
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


@runtime_checkable
class Describes(Protocol):
    """Optional: read instances as they are right now, for the re-check before an action."""

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """Fresh state of each instance, keyed by instance_id; None for one that is gone.

        Batched where the API allows (EC2: one DescribeInstances per account x region
        chunk of up to 1,000 ids). Raises ProviderError when the scope cannot be read.
        """
        ...


@runtime_checkable
class BatchActions(Protocol):
    """Optional: act on many instances in few API calls (the runner prefers it when present).

    The caller has just re-checked `instances` through `Describes.describe_many`, so an
    implementation need not read them again before the call; it must still verify the
    result after, and return one result per instance id it was given.
    """

    def stop_many(
        self, instances: Sequence[Instance], *, dry_run: bool
    ) -> dict[str, ActionResult]:
        ...

    def set_tags_many(
        self,
        instances: Sequence[Instance],
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> dict[str, ActionResult]:
        ...


@dataclass(frozen=True)
class FetchedPrices:
    """List prices a cloud's price API answered: (region, instance type, lifecycle) ->
    USD per hour, the API's name, and the publication date it gave (if any)."""

    prices: Mapping[tuple[str, str, str], float]
    source: str
    published: datetime | None = None


@runtime_checkable
class FetchesPrices(Protocol):
    """Optional: ask the cloud's price API for current list prices (`prices refresh`)."""

    def fetch_list_prices(
        self, regions: Sequence[str], instance_types: Sequence[str]
    ) -> FetchedPrices:
        """On-demand (and, where the API publishes them, spot) hourly list prices of these
        types in these regions. Raises ProviderError when the API cannot be read."""
        ...


class Readings(MinuteRows):
    """What one `gpu_metrics` call returned, as a provider whose calls may overlap returns
    it (`overlapping_metrics`): the readings (as rows, `costguard.minute_rows`), the scopes
    that call could not read (what `metric_gaps` says of the last call to end), for a
    provider that leaves out repeats, the call's receipt (`LeavesOutRepeats`), and how many
    points the call read that no reading can hold (`cloud_readings.validated`: dropped, no
    data)."""

    __slots__ = ("dropped", "gaps", "receipt")

    def __init__(self, rows: MinuteRows, gaps: Sequence[Gap],
                 receipt: Receipt | None = None, dropped: int = 0) -> None:
        super().__init__(rows.names, rows.rows)
        self.gaps = list(gaps)
        self.receipt = receipt
        self.dropped = dropped


def receipt_of(readings: Sequence[GpuMinute]) -> Receipt | None:
    """The receipt `readings` carry (None: not what such a call returned)."""
    return readings.receipt if isinstance(readings, Readings) else None


@runtime_checkable
class LeavesOutRepeats(Protocol):
    """Optional: a provider whose metrics are asked again over the span they settle in
    (`metrics_settle`) that can leave out, from a later `gpu_metrics` call, the readings an
    earlier one returned and that come back unchanged: once the caller says it stored them.
    A caller that never says so gets every reading each time."""

    def readings_stored(self, readings: Sequence[GpuMinute]) -> None:
        """`readings`, what a `gpu_metrics` call returned (the very list), are stored (the
        store and whatever holds them in memory have them): a later call need not return
        them again. Calls may overlap and be confirmed in any order."""
        ...


# given the minutes from a split read's `mid` on, the instances whose older ones are not wanted
Decided = Callable[[Sequence[GpuMinute]], Collection[str]]
# (mid, decided): the minute a split read's recent span begins at, and its `Decided`
Split = tuple[datetime, Decided]


@runtime_checkable
class ReadsWindowOnce(Protocol):
    """Optional: a provider for which asking for a span in two reads costs more than in one.
    Cloud Monitoring's ListTimeSeries reads every series of a project's metric type whatever
    instances and minutes are asked; CloudWatch bills every metric a GetMetricData call
    requests, each time it is requested, and a second read is a second round of calls per
    scope. A first cycle then reads the idle window once (`engine.backfill.fetch_cold`)
    rather than its last quarter hour and then the rest for the instances it did not
    decide."""

    def gpu_metrics_split(
        self, instances: Sequence[Instance], start: datetime, end: datetime, mid: datetime,
        decided: Decided,
    ) -> Sequence[GpuMinute]:
        """`gpu_metrics` over [start, end) in one read, less the minutes before `mid` of
        the instances `decided` names when handed the minutes from `mid` on. Minutes the
        provider reads again next cycle (`metrics_settle`) are kept whatever it says."""
        ...


class Memory(Protocol):
    """A provider's notebook in the store: values that do not change from cycle to cycle
    (an instance type's GPUs), kept so that a restarted daemon does not ask the cloud again.
    Values are JSON; `get` answers None for a name never written."""

    def get(self, name: str) -> Any | None: ...

    def put(self, name: str, value: Any) -> None: ...


class GovernsKinds(Protocol):
    """A provider that lists some kinds of resource only while a loaded policy governs them
    (the AWS provider's SageMaker notebook instances, the GCP provider's Workbench listing):
    a fleet nobody governs notebooks in pays no call for them. The engine tells it once."""

    def govern(self, kinds: frozenset[str]) -> None:
        """`kinds`: the registry kinds (`resource:`) of the policies that name this
        provider."""


@runtime_checkable
class Remembers(Protocol):
    """Optional: a provider that keeps what it learned in the store (`Memory`)."""

    def attach_memory(self, memory: Memory) -> None:
        """Called once, before the first cycle: read what earlier runs wrote, and write
        what this one learns."""
        ...
