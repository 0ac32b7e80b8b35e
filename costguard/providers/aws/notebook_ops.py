"""The AWS provider's SageMaker notebook instances (aws/notebooks.py): listed per (account,
region) beside the EC2 instances, re-read, stopped, started and tagged through SageMaker.
Mixed into AwsProvider, whose settings, clients, clock, GPU catalog and account scopes it
uses; the provider routes an instance of kind `notebook` here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import boto3

from costguard.clock import Clock
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Gap, Instance
from costguard.providers.aws import notebooks
from costguard.providers.aws.gpu_types import GpuTypeCatalog
from costguard.providers.aws.sessions import AccountScope, ClientFactory
from costguard.providers.aws.settings import AwsSettings

log = logging.getLogger(__name__)


@cache
def _sagemaker_regions() -> frozenset[str]:
    """The regions botocore's endpoint data offers SageMaker in (read locally, no call)."""
    session = boto3.session.Session()
    return frozenset(r for partition in session.get_available_partitions()
                     for r in session.get_available_regions("sagemaker", partition))


class AwsNotebookOps:
    """AwsProvider's notebook instances."""

    settings: AwsSettings
    clients: ClientFactory
    clock: Clock
    gpu_types: GpuTypeCatalog
    _account: Callable[[str], AccountScope]
    _denied_said: set[str]
    _denied_lock: threading.Lock
    _governed: frozenset[str]

    def govern(self, kinds: frozenset[str]) -> None:
        """`costguard.providers.base.GovernsKinds`: notebook instances are listed only while
        a notebook policy names this provider."""
        self._governed = kinds

    def _sagemaker(self, account: AccountScope, region: str) -> Any:
        return self.clients.client(account, region, "sagemaker")

    def _lists_notebooks(self, region: str) -> bool:
        """Notebooks are listed while a notebook policy governs them and
        providers.aws.notebooks allows, where SageMaker is offered (any region, against an
        endpoint_url)."""
        return "notebook" in self._governed and self.settings.notebooks and (
            self.settings.endpoint_url is not None or region in _sagemaker_regions())

    def _read_notebooks(self, account: AccountScope, region: str,
                        observed_at: datetime) -> list[Instance] | Gap:
        """One scope's notebook instances; a role that may not list them governs none there
        (said once a process per account), any other failure is a gap."""
        scope = f"{account.account_id}/{region}"
        try:
            ec2 = self.clients.ec2(account, region)
            return notebooks.read_scope(
                self._sagemaker(account, region), account=account.account_id, region=region,
                gpus=lambda types: self.gpu_types.resolve(ec2, region, types),
                observed_at=observed_at)
        except notebooks.NotebooksDenied as exc:
            with self._denied_lock:
                first = account.account_id not in self._denied_said
                self._denied_said.add(account.account_id)
            if first:
                log.warning("aws %s: SageMaker notebook instances not listed (%s): grant "
                            "sagemaker:ListNotebookInstances and sagemaker:ListTags "
                            "(`costguard iam --provider aws` with a notebook policy loaded), "
                            "or set providers.aws.notebooks: false", scope, exc)
            return []
        except ProviderError as exc:
            log.warning("aws scope %s: notebook instances not read: %s", scope, exc)
            return Gap(provider="aws", scope=f"{scope}/notebooks", error=str(exc))

    def _notebook_client(self, instance: Instance) -> Any:
        return self._sagemaker(self._account(instance.account), instance.region)

    def _notebook_act(self, instance: Instance,
                      run: Callable[[Any], ActionResult]) -> ActionResult:
        try:
            client = self._notebook_client(instance)
        except ProviderError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
        return run(client)

    def notebook_power(self, instance: Instance, verb: str, *, dry_run: bool) -> ActionResult:
        return self._notebook_act(
            instance, lambda c: notebooks.power(c, instance, verb, dry_run=dry_run))

    def notebook_tags(self, instance: Instance, tags: Mapping[str, str],
                      remove: Sequence[str], *, dry_run: bool) -> ActionResult:
        return self._notebook_act(
            instance, lambda c: notebooks.set_tags(c, instance, tags, remove, dry_run=dry_run))

    def describe_notebooks(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """Each notebook as SageMaker shows it now (one Describe and one ListTags each:
        SageMaker reads notebooks one at a time). Raises ProviderError as describe_many
        does."""
        now = self.clock.now()
        return {i.instance_id: notebooks.describe(self._notebook_client(i), i, now)
                for i in instances}
