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
from costguard.providers.aws import notebooks, studio
from costguard.providers.aws.gpu_types import GpuSpec, GpuTypeCatalog
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
        """One scope's notebook instances and Studio apps; a role that may not list one of
        them governs none of it there (said once a process per account), any other failure
        is a gap."""
        scope = f"{account.account_id}/{region}"
        out: list[Instance] = []
        try:
            ec2 = self.clients.ec2(account, region)
            client = self._sagemaker(account, region)
        except ProviderError as exc:
            return Gap(provider="aws", scope=f"{scope}/notebooks", error=str(exc))

        def gpus(types: set[str]) -> dict[str, GpuSpec]:
            return self.gpu_types.resolve(ec2, region, types)

        reads: tuple[tuple[str, str, Callable[..., list[Instance]]], ...] = (
                ("notebook instances", "sagemaker:ListNotebookInstances", notebooks.read_scope),
                ("Studio apps", "sagemaker:ListApps", studio.read_scope))
        for what, right, read in reads:
            try:
                out += read(client, account=account.account_id, region=region, gpus=gpus,
                            observed_at=observed_at)
            except notebooks.NotebooksDenied as exc:
                self._said_denied(scope, what, right, exc)
            except ProviderError as exc:
                log.warning("aws scope %s: %s not read: %s", scope, what, exc)
                return Gap(provider="aws", scope=f"{scope}/notebooks", error=str(exc))
        return out

    def _said_denied(self, scope: str, what: str, right: str, exc: Exception) -> None:
        """A role that may not list `what` governs none there: said once a process per
        account and kind of listing."""
        key = f"{scope.split('/', 1)[0]}/{what}"
        with self._denied_lock:
            first = key not in self._denied_said
            self._denied_said.add(key)
        if first:
            log.warning("aws %s: SageMaker %s not listed (%s): grant %s and sagemaker:ListTags "
                        "(`costguard iam --provider aws` with a notebook policy loaded), or set "
                        "providers.aws.notebooks: false", scope, what, exc, right)

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
        side = studio if studio.is_app(instance) else notebooks
        return self._notebook_act(
            instance, lambda c: side.power(c, instance, verb, dry_run=dry_run))

    def notebook_tags(self, instance: Instance, tags: Mapping[str, str],
                      remove: Sequence[str], *, dry_run: bool) -> ActionResult:
        side = studio if studio.is_app(instance) else notebooks
        return self._notebook_act(
            instance, lambda c: side.set_tags(c, instance, tags, remove, dry_run=dry_run))

    def describe_notebooks(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """Each notebook or Studio app as SageMaker shows it now (one Describe and one
        ListTags each: SageMaker reads them one at a time). Raises ProviderError as
        describe_many does."""
        now = self.clock.now()
        return {i.instance_id: (studio if studio.is_app(i) else notebooks).describe(
                    self._notebook_client(i), i, now)
                for i in instances}
