"""Vertex AI Workbench instances through the Notebooks API v2 (`google-cloud-notebooks`, REST
transport), governed as `resource: notebook` (costguard/policy/kinds.py).

A Workbench instance runs on a Compute Engine VM of the same name in the same zone: the VM
is what the inventory lists, prices and reads metrics of (Cloud Monitoring, or the agent,
whose GCE identity token proves the VM), so a notebook is that VM's `Instance` with kind
`notebook` and the Workbench instance's labels over the VM's. What makes a VM a notebook:
a Workbench instance of its zone and name in the project's listing (one paged
`projects/P/locations/-` call a project), or Google's `goog-caip-notebook` label on the VM
(Notebooks release notes, 2021-03-04), which still marks it when the listing cannot be read.

Stop, start and labels go through the Notebooks API (`:stop`, `:start`, PATCH with the
`labels` mask), each a long-running operation waited on: stopping the VM itself would leave
the Workbench instance out of step. Only from ACTIVE (stop) or STOPPED (start), only while
the VM is still the one decided about (same numeric id). Never deleted.

Shapes: cloud.google.com/vertex-ai/docs/workbench/reference/rest/v2/projects.locations.instances.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials
from google.cloud import notebooks_v2
from google.protobuf import field_mask_pb2

from costguard.errors import ProviderError
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Gap,
    Instance,
    InstanceKind,
    InstanceState,
)
from costguard.providers.gcp.actions import label_diff, wanted_labels
from costguard.providers.gcp.errors import explain, for_vm, from_retry_error, service_disabled
from costguard.providers.gcp.gpus import short_name
from costguard.providers.gcp.pool import read_each
from costguard.providers.gcp.tpu_nodes import wait_operation

log = logging.getLogger(__name__)

API = "notebooks.googleapis.com"
NOTEBOOK_LABEL = "goog-caip-notebook"  # set by Google on a notebook's VM

# Instance.State -> costguard's (a Workbench instance's VM bills while ACTIVE)
STATES: dict[str, InstanceState] = {
    "STARTING": InstanceState.PENDING,
    "PROVISIONING": InstanceState.PENDING,
    "INITIALIZING": InstanceState.PENDING,
    "UPGRADING": InstanceState.PENDING,
    "ACTIVE": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED,
    "SUSPENDED": InstanceState.STOPPED,
    "DELETED": InstanceState.TERMINATED,
}


@dataclass(frozen=True)
class Workbench:
    """What the Notebooks API says of one instance."""

    zone: str
    name: str
    state: str
    labels: dict[str, str] = field(default_factory=dict)


Listing = dict[tuple[str, str], Workbench]  # (zone, name) -> instance


def build_client(credentials: gcredentials.Credentials | None,
                 endpoint: str | None) -> notebooks_v2.NotebookServiceClient:
    """The Notebooks API v2 client over REST (`endpoint`: http://127.0.0.1:PORT for the
    fake)."""
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    return notebooks_v2.NotebookServiceClient(credentials=credentials, client_options=options,
                                              transport="rest")


def state_name(raw: Any) -> str:
    """The instance's state; one newer than this client (a number it has no name for) is
    STATE_UNSPECIFIED, which costguard reads as pending: never acted on."""
    try:
        return str(notebooks_v2.State(raw.state).name)
    except ValueError:
        return "STATE_UNSPECIFIED"


def _record(raw: Any) -> Workbench:
    parts = str(raw.name).split("/")  # projects/P/locations/ZONE/instances/NAME
    zone = parts[3] if len(parts) > 5 else ""
    return Workbench(zone=zone, name=short_name(raw.name), state=state_name(raw),
                     labels=dict(raw.labels))


def is_notebook(instance: Instance) -> bool:
    return instance.provider == "gcp" and instance.kind is InstanceKind.NOTEBOOK


def as_notebook(vm: Instance, record: Workbench | None) -> Instance:
    """The VM as the notebook it runs: kind `notebook`, the instance's labels over its own."""
    tags = {**vm.tags, **record.labels} if record is not None else vm.tags
    return vm.model_copy(update={"kind": InstanceKind.NOTEBOOK, "tags": tags})


def rekind(vms: Sequence[Instance], listing: Listing) -> list[Instance]:
    """`vms` (one project's), those that run a Workbench instance as notebooks."""
    out: list[Instance] = []
    for vm in vms:
        record = listing.get((vm.zone or "", vm.name or ""))
        out.append(as_notebook(vm, record) if record is not None or NOTEBOOK_LABEL in vm.tags
                   else vm)
    return out


def path_of(instance: Instance) -> str:
    if not instance.zone or not instance.name:
        raise ProviderError("gcp", instance.account, f"notebook {instance.instance_id} has no "
                            "zone/name; re-run inventory before acting")
    return f"projects/{instance.account}/locations/{instance.zone}/instances/{instance.name}"


class WorkbenchSide:
    """The provider's Workbench side: one client, its retry, operation timeout and pool."""

    def __init__(self, client: notebooks_v2.NotebookServiceClient, *, retry: gretry.Retry,
                 timeout_s: float, workers: int, page_size: int) -> None:
        self.client = client
        self.retry = retry
        self.timeout_s = timeout_s
        self.workers = workers
        self.page_size = page_size
        self._denied: set[str] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        self.client.transport.close()  # type: ignore[no-untyped-call]

    def list_project(self, project: str) -> Listing | Gap:
        """Every Workbench instance of `project`. A project whose Notebooks API is disabled
        has none (most projects); a role that may not list them governs none there (said
        once a process); any other failure is a gap for the project's notebooks."""
        request = notebooks_v2.ListInstancesRequest(parent=f"projects/{project}/locations/-",
                                                    page_size=self.page_size)
        scope = f"{project}/workbench"
        try:
            found = list(self.client.list_instances(request=request, retry=self.retry))
        except gexc.GoogleAPICallError as exc:
            if service_disabled(exc):
                log.debug("gcp: the Notebooks API is disabled in %s: no Workbench instances",
                          project)
                return {}
            if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied):
                self._said_denied(project, explain(exc, project, API))
                return {}
            return Gap(provider="gcp", scope=scope, error=explain(exc, project, API))
        except gexc.RetryError as exc:
            return Gap(provider="gcp", scope=scope,
                       error=str(from_retry_error(exc, project, API)))
        records = [_record(raw) for raw in found]
        return {(r.zone, r.name): r for r in records}

    def _said_denied(self, project: str, why: str) -> None:
        with self._lock:
            first = project not in self._denied
            self._denied.add(project)
        if first:
            log.warning("gcp %s: Workbench instances not listed (%s): grant "
                        "notebooks.instances.list (`costguard iam --provider gcp` with a "
                        "notebook policy loaded), or set providers.gcp.workbench: false; "
                        "VMs labelled %s are still governed as notebooks", project, why,
                        NOTEBOOK_LABEL)

    def read(self, instance: Instance) -> Any | None:
        """The Workbench instance as it is now; None when it is gone."""
        def get() -> Any | None:
            try:
                return self.client.get_instance(name=path_of(instance), retry=self.retry)
            except gexc.NotFound:
                return None
        return for_vm(instance, get, API)

    def refresh(self, vm: Instance) -> Instance:
        """A notebook's VM, as Compute Engine shows it now, with its Workbench labels read
        again (a protect label set since the listing counts)."""
        raw = self.read(vm)
        return as_notebook(vm, _record(raw) if raw is not None else None)

    def power(self, instance: Instance, verb: str, *, vm_now: Callable[[], Instance | None],
              dry_run: bool) -> ActionResult:
        """Stop (from ACTIVE) or start (from STOPPED) the notebook decided about."""
        allowed = "ACTIVE" if verb == "stop" else "STOPPED"
        raw = self.read(instance)
        if raw is None:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"Workbench instance {instance.name} is gone; nothing "
                                       "done", state_after=InstanceState.TERMINATED)
        record = _record(raw)
        state = STATES.get(record.state, InstanceState.PENDING)
        vm = vm_now()
        if vm is None or vm.instance_id != instance.instance_id:
            return ActionResult(outcome=ActionOutcome.SKIPPED, state_after=state, detail=(
                f"notebook {instance.name}'s VM was recreated or is gone (expected id "
                f"{instance.instance_id}); nothing done"))
        if record.state != allowed:
            return ActionResult(outcome=ActionOutcome.SKIPPED, state_after=state, detail=(
                f"Workbench instance {instance.name} is {record.state} now, not {allowed}; "
                "nothing done"))
        if dry_run:  # the Notebooks API has no validate-only stop
            return ActionResult(outcome=ActionOutcome.DRY_RUN, state_after=state, detail=(
                f"would {verb} Workbench instance {instance.name} in {instance.zone} of "
                f"project {instance.account}"))
        method = (self.client.stop_instance if verb == "stop"
                  else self.client.start_instance)
        op = for_vm(instance, lambda: method(request={"name": path_of(instance)},
                                             retry=self.retry), API)
        error = wait_operation(op, self.timeout_s, instance, API)
        after = self.read(instance)
        state_after = (InstanceState.TERMINATED if after is None
                       else STATES.get(_record(after).state, InstanceState.PENDING))
        if error:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=error,
                                state_after=state_after)
        return ActionResult(outcome=ActionOutcome.DONE, state_after=state_after, detail=(
            f"{verb} Workbench instance {instance.name}: operation "
            f"{short_name(op.operation.name)} done"))

    def relabel(self, instance: Instance, tags: Mapping[str, str], *,
                remove: Sequence[str], dry_run: bool) -> ActionResult:
        """Merge `tags` into the Workbench instance's labels (PATCH, `labels` mask)."""
        raw = self.read(instance)
        if raw is None:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"Workbench instance {instance.name} is gone; nothing "
                                       "done")
        record = _record(raw)
        state = STATES.get(record.state, InstanceState.PENDING)
        wanted = wanted_labels(record.labels, tags, remove)
        diff = label_diff(record.labels, wanted)
        if wanted == record.labels:
            return ActionResult(
                outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
                detail=f"labels of {instance.name} already as wanted; nothing to change",
                state_after=state)
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN, state_after=state,
                                detail=f"would set labels of {instance.name}: {diff}")
        update = notebooks_v2.Instance(name=raw.name, labels=wanted)
        mask = field_mask_pb2.FieldMask(paths=["labels"])
        op = for_vm(instance, lambda: self.client.update_instance(
            instance=update, update_mask=mask, retry=self.retry), API)
        error = wait_operation(op, self.timeout_s, instance, API)
        if error:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=error, state_after=state)
        return ActionResult(outcome=ActionOutcome.DONE, state_after=state,
                            detail=f"labels of {instance.name}: {diff}")

    def refresh_many(self, vms: Sequence[Instance]) -> dict[str, Instance]:
        """`refresh` on each, `workers` at a time; raises the first error."""
        return read_each(vms, self.refresh, self.workers)
