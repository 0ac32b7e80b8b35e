"""Managed instance groups: their sizes for inventory, and scale-in by one member.

Sizes: per project with a MIG member in the listing, one `instanceGroupManagers.
aggregatedList` (every zonal and regional group: `targetSize`) and one `autoscalers.
aggregatedList` (each autoscaler's `target` group and its `autoscalingPolicy.minNumReplicas`
/ `maxNumReplicas`). A group without an autoscaler has no minimum but zero.

Scale-in: the group is read again (`get`, and its autoscaler), then
`deleteInstances` (zonal or regional) removes the member and lowers the target size by one,
so the group does not recreate it. Never below the autoscaler's minimum.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials

from costguard.model import (
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceState,
    OwnerKind,
)
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.errors import explain, from_retry_error
from costguard.providers.shrink import shrink_by_one

log = logging.getLogger(__name__)

Sizes = tuple[int | None, int | None, int | None]  # target size, autoscaler min, max


def short(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class GroupClients:
    """The three clients MIGs need, made on first use with the instances client's options."""

    credentials: gcredentials.Credentials | None
    endpoint: str | None
    retry: gretry.Retry

    def _options(self) -> ClientOptions:
        return ClientOptions(api_endpoint=self.endpoint) if self.endpoint else ClientOptions()

    @cached_property
    def zonal(self) -> compute_v1.InstanceGroupManagersClient:
        return compute_v1.InstanceGroupManagersClient(credentials=self.credentials,
                                                      client_options=self._options())

    @cached_property
    def regional(self) -> compute_v1.RegionInstanceGroupManagersClient:
        return compute_v1.RegionInstanceGroupManagersClient(credentials=self.credentials,
                                                            client_options=self._options())

    @cached_property
    def autoscalers(self) -> compute_v1.AutoscalersClient:
        return compute_v1.AutoscalersClient(credentials=self.credentials,
                                            client_options=self._options())

    def close(self) -> None:
        for name in ("zonal", "regional", "autoscalers"):
            client = self.__dict__.get(name)
            if client is not None:
                client.transport.close()

    # -- sizes for inventory -----------------------------------------------------------
    def project_sizes(self, project: str) -> dict[tuple[str, str], Sizes]:
        """(zone or region, group name) -> sizes, for every MIG of `project`. Raises
        google-api-core errors (the caller keeps the members managed, unsized)."""
        limits: dict[tuple[str, str], tuple[int | None, int | None]] = {}
        request = compute_v1.AggregatedListAutoscalersRequest(project=project)
        for scope, scoped in self.autoscalers.aggregated_list(request=request,
                                                              retry=self.retry):
            for autoscaler in scoped.autoscalers:
                policy = autoscaler.autoscaling_policy
                limits[(short(scope), short(autoscaler.target))] = (
                    policy.min_num_replicas, policy.max_num_replicas or None)
        out: dict[tuple[str, str], Sizes] = {}
        request_m = compute_v1.AggregatedListInstanceGroupManagersRequest(project=project)
        for scope, scoped in self.zonal.aggregated_list(request=request_m, retry=self.retry):
            for mig in scoped.instance_group_managers:
                key = (short(scope), mig.name)
                low, high = limits.get(key, (0, None))
                out[key] = (mig.target_size, low, high)
        return out

    def with_sizes(self, project: str, instances: Sequence[Instance]) -> list[Instance]:
        """The project's MIG members with their groups' sizes (2 calls for the project)."""
        if not any(i.owner and i.owner.kind is OwnerKind.MIG for i in instances):
            return list(instances)
        try:
            sizes = self.project_sizes(project)
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            log.warning("managed instance group sizes not read for %s: %s", project, exc)
            return list(instances)
        out = []
        for inst in instances:
            owner = inst.owner
            found = sizes.get((owner.scope, owner.name)) if owner and \
                owner.kind is OwnerKind.MIG else None
            if owner is None or found is None:
                out.append(inst)
                continue
            target, low, high = found
            out.append(inst.model_copy(update={"owner": owner.model_copy(update={
                "desired": target, "min_size": low, "max_size": high})}))
        return out

    # -- scale-in ----------------------------------------------------------------------
    def _read(self, project: str, scope: str, name: str, regional: bool) -> tuple[Any, int]:
        """The group now, and its minimum (its autoscaler's, else 0)."""
        if regional:
            mig = self.regional.get(project=project, region=scope,
                                    instance_group_manager=name, retry=self.retry)
        else:
            mig = self.zonal.get(project=project, zone=scope, instance_group_manager=name,
                                 retry=self.retry)
        autoscaler_url = mig.status.autoscaler if mig.status else ""
        if not autoscaler_url:
            return mig, 0
        if regional:
            autoscaler = compute_v1.RegionAutoscalersClient(
                credentials=self.credentials, client_options=self._options()).get(
                project=project, region=scope, autoscaler=short(autoscaler_url),
                retry=self.retry)
        else:
            autoscaler = self.autoscalers.get(project=project, zone=scope,
                                              autoscaler=short(autoscaler_url),
                                              retry=self.retry)
        return mig, int(autoscaler.autoscaling_policy.min_num_replicas or 0)

    def _api(self, project: str, run: Callable[[], ActionResult]) -> ActionResult:
        """`run`, with the Compute API's errors as a failed result naming what to do."""
        try:
            return run()
        except gexc.RetryError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED,
                                detail=str(from_retry_error(exc, project)))
        except gexc.GoogleAPICallError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))

    @staticmethod
    def _settled(op: Any, detail: str, state_after: InstanceState | None = None
                 ) -> ActionResult:
        if op.error and op.error.errors:
            return ActionResult(outcome=ActionOutcome.FAILED,
                                detail="; ".join(e.message for e in op.error.errors))
        return ActionResult(outcome=ActionOutcome.DONE, detail=detail, state_after=state_after)

    def scale_in(self, inst: Instance, *, dry_run: bool) -> ActionResult:
        owner = inst.owner
        if owner is None or owner.kind is not OwnerKind.MIG:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail="not a member of a managed instance group")
        project, regional = inst.account, owner.scope == inst.region

        def run() -> ActionResult:
            assert owner is not None
            mig, low = self._read(project, owner.scope, owner.name, regional=regional)
            final, sizes = shrink_by_one(
                owner.name, int(mig.target_size), low, size_name="target size",
                min_name="minimum", fix="lower the autoscaler's minimum to let it shrink",
                dry_run=dry_run)
            if final is not None:
                return final
            body = {"instances": [f"zones/{inst.zone}/instances/{inst.name}"],
                    "skip_instances_on_validation_error": False}
            if regional:
                op = self.regional.delete_instances_unary(
                    project=project, region=owner.scope, instance_group_manager=owner.name,
                    region_instance_group_managers_delete_instances_request_resource=(
                        compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(body)),
                    retry=self.retry)
            else:
                op = self.zonal.delete_instances_unary(
                    project=project, zone=owner.scope, instance_group_manager=owner.name,
                    instance_group_managers_delete_instances_request_resource=(
                        compute_v1.InstanceGroupManagersDeleteInstancesRequest(body)),
                    retry=self.retry)
            return self._settled(op, f"removed from managed instance group {owner.name}: "
                                     f"{sizes}", InstanceState.TERMINATED)

        return self._api(project, run)

    def resize_group(self, member: Instance, *, min_size: int, desired: int,
                     max_size: int | None, hint: str | None, dry_run: bool) -> ActionResult:
        """Set a managed instance group's target size (`resize`, zonal or regional) for
        `scale_to_zero` and its restore. A group run by an autoscaler is left alone: the
        autoscaler would undo the resize (give it a scaling schedule instead). A MIG has no
        labels of its own, so no hint is written (`hint` is ignored); the journal keeps the
        sizes."""
        owner = member.owner
        if owner is None or owner.kind is not OwnerKind.MIG:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail="not a managed instance group")
        project, regional = member.account, owner.scope == member.region

        def run() -> ActionResult:
            assert owner is not None
            mig, _ = self._read(project, owner.scope, owner.name, regional=regional)
            if mig.status and mig.status.autoscaler:
                return ActionResult(
                    outcome=ActionOutcome.SKIPPED,
                    detail=f"{owner.name} is run by an autoscaler, which would undo a resize: "
                           f"give the autoscaler a scaling schedule instead")
            sizes = f"target size {mig.target_size} -> {desired}"
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                    detail=f"would set {owner.name}: {sizes}")
            if regional:
                op = self.regional.resize_unary(project=project, region=owner.scope,
                                                instance_group_manager=owner.name,
                                                size=desired, retry=self.retry)
            else:
                op = self.zonal.resize_unary(project=project, zone=owner.scope,
                                             instance_group_manager=owner.name, size=desired,
                                             retry=self.retry)
            return self._settled(op, f"{owner.name}: {sizes}")

        return self._api(project, run)
