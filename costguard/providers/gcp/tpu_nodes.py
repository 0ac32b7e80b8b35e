"""Cloud TPU VMs through the Cloud TPU API v2 (`google-cloud-tpu`, REST transport): listing
every node of a project (`projects/P/locations/-`: all zones in one paged call), reading one,
stop, start and relabel, each a long-running operation waited on.

A node is one `Instance`: `instance_id` the node's numeric `id`, `name` its short name,
`instance_type` its accelerator type (`v5litepod-8`), `gpu_count` its chips, `gpu_model`
its generation ("TPU v5e"). A multi-host slice is owned by itself (`OwnerKind.TPU_SLICE`) and
a queued resource's node by the queued resource, so the safety rules that keep costguard off
a controller's members keep it off them: the API stops single-host nodes only, and a slice
is one program across its hosts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import operation as goperation
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials
from google.cloud import tpu_v2
from google.protobuf import field_mask_pb2

from costguard.actions.safety import SAME_LAUNCH
from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Gap,
    Instance,
    InstanceState,
    Inventory,
    Lifecycle,
    Owner,
    OwnerKind,
)
from costguard.providers.gcp import tpus
from costguard.providers.gcp.actions import label_diff, wanted_labels
from costguard.providers.gcp.errors import (
    explain,
    for_vm,
    from_retry_error,
    service_disabled,
    vm_scope,
)
from costguard.providers.gcp.gpus import short_name, tpu_spec
from costguard.providers.gcp.inventory import labels_as_tags, region_of
from costguard.providers.gcp.pool import read_each

log = logging.getLogger(__name__)

API = "tpu.googleapis.com"

# Node.State -> costguard's. Charges accrue while a node is READY (cloud.google.com/tpu/pricing).
STATES: dict[str, InstanceState] = {
    "READY": InstanceState.RUNNING,
    "CREATING": InstanceState.PENDING,
    "STARTING": InstanceState.PENDING,
    "RESTARTING": InstanceState.PENDING,
    "REIMAGING": InstanceState.PENDING,
    "REPAIRING": InstanceState.PENDING,
    "UNHIDING": InstanceState.PENDING,
    "STOPPING": InstanceState.STOPPING,
    "HIDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED,
    "HIDDEN": InstanceState.STOPPED,
    "PREEMPTED": InstanceState.STOPPED,
    "DELETING": InstanceState.TERMINATED,
    "TERMINATED": InstanceState.TERMINATED,
}


def build_client(credentials: gcredentials.Credentials | None,
                 endpoint: str | None) -> tpu_v2.TpuClient:
    """The Cloud TPU client over REST (`endpoint`: http://127.0.0.1:PORT for the fake)."""
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    return tpu_v2.TpuClient(credentials=credentials, client_options=options, transport="rest")


def state_name(node: Any) -> str:
    return str(tpu_v2.Node.State(node.state).name)


def _created(node: Any, fallback: datetime) -> datetime:
    stamp = node.create_time  # proto-plus gives a DatetimeWithNanoseconds, or None unset
    return utc(stamp) if stamp else fallback


def _location(name: str) -> str:
    """`projects/p/locations/us-central1-a/nodes/n` -> `us-central1-a`."""
    parts = name.split("/")
    return parts[3] if len(parts) > 3 else ""


def owner_of(node: Any, shape: tpus.TpuShape | None, zone: str) -> Owner | None:
    """The queued resource that made the node, or the slice itself when it has hosts."""
    labels = dict(node.labels)
    if node.queued_resource:
        return Owner(kind=OwnerKind.TPU_QUEUED_RESOURCE, name=short_name(node.queued_resource),
                     scope=zone, via="the node's queuedResource", tags=labels_as_tags(labels))
    hosts = len(node.network_endpoints) or (shape.hosts if shape else 1)
    if hosts > 1 or node.multislice_node:
        what = f"{hosts} hosts" + (", part of a multislice" if node.multislice_node else "")
        return Owner(kind=OwnerKind.TPU_SLICE, name=short_name(node.name), scope=zone,
                     via=f"{node.accelerator_type or 'TPU'} slice of {what}",
                     tags=labels_as_tags(labels))
    return None


_WARNED: set[str] = set()


def _unknown_type(accelerator_type: str) -> None:
    """Said once a process: a node of a type the TPU catalog does not know is listed without
    chips (no accelerator: never judged idle, unpriced)."""
    if accelerator_type not in _WARNED:
        _WARNED.add(accelerator_type)
        log.warning("gcp: TPU accelerator type %r is not in costguard's TPU catalog: its nodes "
                    "are listed without chips or price until costguard knows it",
                    accelerator_type)


def to_instance(project: str, node: Any, observed_at: datetime) -> Instance:
    zone = _location(node.name)
    config = node.accelerator_config
    try:
        config_type = tpu_v2.AcceleratorConfig.Type(config.type_).name if config else ""
    except ValueError:  # a generation newer than this client: read from the type's name
        config_type = ""
    shape = tpus.shape(node.accelerator_type, topology=config.topology if config else "",
                       config_type=config_type if config_type != "TYPE_UNSPECIFIED" else "",
                       hosts=len(node.network_endpoints) or None)
    spec = tpu_spec(shape.generation) if shape else None
    if shape is None:
        _unknown_type(node.accelerator_type)
    state = state_name(node)
    sched = node.scheduling_config
    lifecycle = (Lifecycle.SPOT if sched and (sched.spot or sched.preemptible)
                 else Lifecycle.CAPACITY_BLOCK if sched and sched.reserved
                 else Lifecycle.ON_DEMAND)
    created = _created(node, observed_at)
    return Instance(
        provider="gcp", account=project, region=region_of(zone), zone=zone,
        instance_id=str(node.id) if node.id else node.name,
        name=short_name(node.name),
        instance_type=node.accelerator_type or (shape.generation.type_prefix
                                                + str(shape.chips) if shape
                                                else tpus.UNKNOWN_TYPE),
        state=STATES.get(state, InstanceState.PENDING),
        state_reason=state if state not in ("READY", "STOPPED") else None,
        lifecycle=lifecycle,
        gpu_count=shape.chips if shape else 0,
        gpu_model=spec.model if spec else None,
        gpu_memory_mib=spec.memory_mib if spec else None,
        # the API gives no start time: a stopped node started again reads as created
        launch_time=created,
        tags=labels_as_tags(dict(node.labels)),
        observed_at=observed_at,
        launched_by=(node.service_account.email or None) if node.service_account else None,
        owner=owner_of(node, shape, zone),
    )


def list_project(client: tpu_v2.TpuClient, project: str, *, page_size: int,
                 retry: gretry.Retry, observed_at: datetime) -> Inventory:
    """Every TPU node of `project`. A project whose Cloud TPU API is disabled has none (said
    at debug level: most projects); any other failure is a gap for the project's TPUs."""
    request = tpu_v2.ListNodesRequest(parent=f"projects/{project}/locations/-",
                                      page_size=page_size)
    try:
        nodes = list(client.list_nodes(request=request, retry=retry))
    except gexc.GoogleAPICallError as exc:
        if service_disabled(exc):
            log.debug("gcp: the Cloud TPU API is disabled in %s: no TPU nodes", project)
            return Inventory()
        return Inventory(gaps=[Gap(provider="gcp", scope=f"{project}/tpu",
                                   error=explain(exc, project, API))])
    except gexc.RetryError as exc:
        return Inventory(gaps=[Gap(provider="gcp", scope=f"{project}/tpu",
                                   error=str(from_retry_error(exc, project, API)))])
    return Inventory(instances=[to_instance(project, n, observed_at) for n in nodes])


def node_path(instance: Instance) -> str:
    if not instance.zone or not instance.name:
        raise ProviderError("gcp", instance.account, f"TPU node {instance.instance_id} has no "
                            "zone/name; re-run inventory before acting")
    return f"projects/{instance.account}/locations/{instance.zone}/nodes/{instance.name}"


def read(client: tpu_v2.TpuClient, instance: Instance, retry: gretry.Retry) -> Any | None:
    """The node as it is now; None when it is gone."""
    def get() -> Any | None:
        try:
            return client.get_node(name=node_path(instance), retry=retry)
        except gexc.NotFound:
            return None
    return for_vm(instance, get, API)


def describe(client: tpu_v2.TpuClient, instance: Instance, retry: gretry.Retry,
             observed_at: datetime) -> Instance | None:
    node = read(client, instance, retry)
    return None if node is None else to_instance(instance.account, node, observed_at)


def _changed(instance: Instance, node: Any) -> str | None:
    """Why the node is not the one decided about: recreated under its name, or now owned
    (read as inventory reads it)."""
    # read at the launch time decided about: a node with no createTime reads as unchanged
    fresh = to_instance(instance.account, node, instance.launch_time)
    if fresh.instance_id != instance.instance_id:
        return (f"{instance.name} was recreated (id {fresh.instance_id}, expected "
                f"{instance.instance_id})")
    if abs(fresh.launch_time - utc(instance.launch_time)) > SAME_LAUNCH:
        return f"{instance.name} was recreated at {fresh.launch_time.isoformat()}"
    if fresh.owner is not None:
        return f"managed by {fresh.owner} ({fresh.owner.via}): not acted on as if it were alone"
    return None


def wait_operation(op: goperation.Operation, timeout_s: float, instance: Instance,
                   api: str = API) -> str | None:
    """Wait for a long-running operation (of the Cloud TPU API, or `api`'s); its error
    message, None when it succeeded."""
    deadline = time.monotonic() + timeout_s
    try:
        op.result(timeout=timeout_s)  # type: ignore[no-untyped-call]
    except gexc.GoogleAPICallError as exc:  # the operation ended with an error
        return f"{exc.code}: {exc.message}" if getattr(exc, "code", None) else str(exc)
    except TimeoutError:
        raise ProviderError("gcp", vm_scope(instance), f"operation {op.operation.name} not done "
                            f"after {timeout_s:.0f} s", retryable=True) from None
    except gexc.RetryError as exc:
        if time.monotonic() >= deadline:
            raise ProviderError("gcp", vm_scope(instance), f"operation {op.operation.name} not "
                                f"done after {timeout_s:.0f} s", retryable=True) from None
        raise from_retry_error(exc, vm_scope(instance), api) from exc
    return None


def change_power(client: tpu_v2.TpuClient, instance: Instance, *, verb: str,
                 allowed_from: InstanceState, retry: gretry.Retry, timeout_s: float,
                 dry_run: bool) -> ActionResult:
    """Stop or start one node: read it, act only on the node decided about, wait, read."""
    node = read(client, instance, retry)
    if node is None:
        return ActionResult(outcome=ActionOutcome.SKIPPED,
                            detail=f"TPU node {instance.name} is gone; nothing done",
                            state_after=InstanceState.TERMINATED)
    state = STATES.get(state_name(node), InstanceState.PENDING)
    why = _changed(instance, node)
    if why:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why, state_after=state)
    if state is not allowed_from:
        return ActionResult(outcome=ActionOutcome.SKIPPED,
                            detail=f"TPU node {instance.name} is {state_name(node)} now, not "
                                   f"{verb}-able; nothing done", state_after=state)
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would {verb} TPU node {instance.name} "
                                   f"({node.accelerator_type}, {state_name(node)}) in "
                                   f"{instance.zone} of project {instance.account}",
                            state_after=state)
    method = client.stop_node if verb == "stop" else client.start_node
    op = for_vm(instance, lambda: method(request={"name": node_path(instance)}, retry=retry),
                API)
    error = wait_operation(op, timeout_s, instance)
    after = read(client, instance, retry)
    state_after = (InstanceState.TERMINATED if after is None
                   else STATES.get(state_name(after), InstanceState.PENDING))
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=error, state_after=state_after)
    return ActionResult(outcome=ActionOutcome.DONE,
                        detail=f"{verb} TPU node {instance.name}: operation "
                               f"{short_name(op.operation.name)} done",
                        state_after=state_after)


def set_labels(client: tpu_v2.TpuClient, instance: Instance, tags: Mapping[str, str], *,
               remove: Sequence[str], retry: gretry.Retry, timeout_s: float,
               dry_run: bool) -> ActionResult:
    """Merge `tags` into the node's labels (UpdateNode with the `labels` mask)."""
    node = read(client, instance, retry)
    if node is None:
        return ActionResult(outcome=ActionOutcome.SKIPPED,
                            detail=f"TPU node {instance.name} is gone; nothing done")
    if node.id and str(node.id) != instance.instance_id:
        return ActionResult(outcome=ActionOutcome.SKIPPED,
                            detail=f"{instance.name} was recreated (id {node.id})")
    state = STATES.get(state_name(node), InstanceState.PENDING)
    current = dict(node.labels)
    wanted = wanted_labels(current, tags, remove)
    diff = label_diff(current, wanted)
    if wanted == current:
        return ActionResult(outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
                            detail=f"labels of {instance.name} already as wanted; nothing to "
                                   "change", state_after=state)
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would set labels of {instance.name}: {diff}",
                            state_after=state)
    update = tpu_v2.Node(name=node.name, labels=wanted)
    mask = field_mask_pb2.FieldMask(paths=["labels"])
    op = for_vm(instance, lambda: client.update_node(node=update, update_mask=mask, retry=retry),
                API)
    error = wait_operation(op, timeout_s, instance)
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=error, state_after=state)
    return ActionResult(outcome=ActionOutcome.DONE,
                        detail=f"labels of {instance.name}: {diff}", state_after=state)


class TpuNodes:
    """The provider's Cloud TPU side: one client, its retry, operation timeout and pool."""

    def __init__(self, client: tpu_v2.TpuClient, *, retry: gretry.Retry, timeout_s: float,
                 workers: int, page_size: int, now: Callable[[], datetime]) -> None:
        self.client = client
        self.retry = retry
        self.timeout_s = timeout_s
        self.workers = workers
        self.page_size = page_size
        self.now = now

    def close(self) -> None:
        self.client.transport.close()  # type: ignore[no-untyped-call]

    def list_project(self, project: str, observed_at: datetime) -> Inventory:
        return list_project(self.client, project, page_size=self.page_size, retry=self.retry,
                            observed_at=observed_at)

    def describe_many(self, nodes: Sequence[Instance]) -> dict[str, Instance | None]:
        now = self.now()
        return read_each(nodes, lambda n: describe(self.client, n, self.retry, now),
                         self.workers)

    def power(self, node: Instance, verb: str, *, dry_run: bool) -> ActionResult:
        allowed = InstanceState.RUNNING if verb == "stop" else InstanceState.STOPPED
        return change_power(self.client, node, verb=verb, allowed_from=allowed,
                            retry=self.retry, timeout_s=self.timeout_s, dry_run=dry_run)

    def relabel(self, node: Instance, tags: Mapping[str, str], *, remove: Sequence[str],
                dry_run: bool) -> ActionResult:
        return set_labels(self.client, node, tags, remove=remove, retry=self.retry,
                          timeout_s=self.timeout_s, dry_run=dry_run)
