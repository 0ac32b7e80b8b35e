"""Stopping a workload through its owner, each kind the way its own project stops it, and
starting it again (docs/kubernetes.md "Actions").

    Deployment, StatefulSet  spec.replicas to 0; the count it had is written in the same
                             patch to costguard.io/replicas-before (one write: a crash
                             cannot keep the one without the other), restored by `start`.
                             One an HorizontalPodAutoscaler scales is left alone (it would
                             scale it back up).
    Job                      spec.suspend: its pods end; resuming runs them again
    CronJob                  suspended, with the Jobs it is running
    Notebook (Kubeflow)      the `kubeflow-resource-stopped` annotation, as Kubeflow's own
                             UI stops one: its controller scales it to zero, its volume stays
    JupyterHub server        through the hub's REST API, as its idle culler stops one
    Pod (no controller)      deleted, only where the cluster sets delete_bare_pods

Every patch carries the resourceVersion costguard read: a workload changed since (scaled
by hand, redeployed) is refused by the API server, never overwritten. A workload already
stopped is skipped: its recorded replica count is never overwritten by 0.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from costguard.actions.safety import is_protected
from costguard.k8s import jupyterhub
from costguard.k8s.api import Api, KubeObject
from costguard.k8s.settings import ClusterSettings
from costguard.k8s.workloads import KUBEFLOW_STOPPED, REPLICAS_BEFORE, STOPPED_AT, Governed
from costguard.model import ActionOutcome, ActionResult, InstanceState


def _skip(detail: str) -> ActionResult:
    return ActionResult(outcome=ActionOutcome.SKIPPED, detail=detail)


def _done(detail: str, state: InstanceState, dry_run: bool) -> ActionResult:
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="would have " + detail)
    return ActionResult(outcome=ActionOutcome.DONE, detail=detail, state_after=state)


def _stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def stop(api: Api, g: Governed, cfg: ClusterSettings, now: datetime, *,
         dry_run: bool) -> ActionResult:
    obj, what = g.obj, f"{g.kind} {g.namespace}/{g.name}"
    if obj is None:
        return _skip(f"its pods belong to {g.controller}, a controller costguard does not act "
                     "through: stop it there")
    if g.namespace in cfg.protected_namespaces or is_protected(g.instance(now)):
        # the engine never gets this far with one; a stop asked for directly does not either
        return _skip(f"{what} is protected (costguard.io/protect, or its namespace)")
    if g.kind in ("Deployment", "StatefulSet"):
        if g.hpa:
            return _skip(f"HorizontalPodAutoscaler {g.hpa} scales {what} and would scale it "
                         "back up: lower its minReplicas or scale it on a schedule")
        replicas = obj.replicas or 0
        if replicas == 0:
            return _skip(f"{what} has 0 replicas already")
        body = {"spec": {"replicas": 0}, "metadata": {"annotations": {
            REPLICAS_BEFORE: str(replicas), STOPPED_AT: _stamp(now)}}}
        detail = f"scaled {what} from {replicas} to 0 replicas (kept in {REPLICAS_BEFORE})"
        return _patch(api, g, obj, body, detail, dry_run)
    if g.kind == "Job":
        if obj.suspended:
            return _skip(f"{what} is suspended already")
        return _patch(api, g, obj, _suspend(True, now),
                      f"suspended {what}: its pods end; resuming it runs them again", dry_run)
    if g.kind == "CronJob":
        return _cronjob(api, g, obj, now, dry_run, suspend=True)
    if g.kind == "Notebook":
        if KUBEFLOW_STOPPED in obj.annotations:
            return _skip(f"{what} is stopped already")
        stamp = _stamp(now)
        body = {"metadata": {"annotations": {KUBEFLOW_STOPPED: stamp, STOPPED_AT: stamp}}}
        return _patch(api, g, obj, body, f"stopped Kubeflow {what} ({KUBEFLOW_STOPPED}): its "
                      "controller scales it to zero and keeps its volume", dry_run)
    if g.kind == "JupyterServer":
        return _jupyter(g, cfg, dry_run)
    if g.kind == "Pod":
        if not cfg.delete_bare_pods:
            return _skip(f"pod {g.namespace}/{g.name} has no controller to stop it through and "
                         f"deleting it ends its work for good: set delete_bare_pods: true for "
                         f"cluster {cfg.name} to allow it")
        if not dry_run:
            api.delete_pod(obj)
        return _done(f"deleted bare pod {g.namespace}/{g.name}", InstanceState.TERMINATED,
                     dry_run)
    return _skip(f"costguard does not stop a {g.kind}")


def start(api: Api, g: Governed, *, dry_run: bool) -> ActionResult:
    obj, what = g.obj, f"{g.kind} {g.namespace}/{g.name}"
    if obj is None:
        return _skip(f"its pods belong to {g.controller}: start it there")
    ann = obj.annotations
    if g.kind in ("Deployment", "StatefulSet"):
        before = ann.get(REPLICAS_BEFORE, "")
        if not before.isdigit() or int(before) <= 0:
            return _skip(f"{what} has no replica count costguard kept ({REPLICAS_BEFORE}): "
                         "costguard did not scale it to zero")
        if (obj.replicas or 0) != 0:
            return _skip(f"{what} runs {obj.replicas} replicas already")
        body = {"spec": {"replicas": int(before)}, "metadata": {"annotations": {
            REPLICAS_BEFORE: None, STOPPED_AT: None}}}
        return _patch(api, g, obj, body, f"scaled {what} from 0 back to {before} replicas",
                      dry_run, InstanceState.RUNNING)
    if g.kind == "Job":
        if not obj.suspended or STOPPED_AT not in ann:
            return _skip(f"{what} was not suspended by costguard")
        return _patch(api, g, obj, _suspend(False, None), f"resumed {what}", dry_run,
                      InstanceState.RUNNING)
    if g.kind == "CronJob":
        return _cronjob(api, g, obj, None, dry_run, suspend=False)
    if g.kind == "Notebook":
        if KUBEFLOW_STOPPED not in ann:
            return _skip(f"{what} is not stopped")
        body = {"metadata": {"annotations": {KUBEFLOW_STOPPED: None, STOPPED_AT: None}}}
        return _patch(api, g, obj, body, f"started Kubeflow {what}", dry_run,
                      InstanceState.RUNNING)
    if g.kind == "JupyterServer":
        return _skip("a JupyterHub server is started by its user, from the hub")
    return _skip(f"costguard does not start a {g.kind}")


def _jupyter(g: Governed, cfg: ClusterSettings, dry_run: bool) -> ActionResult:
    """A single-user server, stopped through its hub (the hub then ends the pod)."""
    assert g.obj is not None
    user, server = jupyterhub.owner(g.obj)
    what = f"{user}'s JupyterHub server" + (f" {server!r}" if server else "")
    if cfg.jupyterhub is None:
        return _skip(f"{what} is stopped through its hub: set jupyterhub (url, token_file) "
                     f"for cluster {cfg.name}")
    if not dry_run:
        jupyterhub.stop_server(cfg.jupyterhub, cfg.name, user, server,
                               cfg.timeout.total_seconds())
    return _done(f"stopped {what} through the hub's API (the user starts it again from "
                 "the hub)", InstanceState.STOPPED, dry_run)


def _suspend(on: bool, now: datetime | None) -> dict[str, Any]:
    return {"spec": {"suspend": on}, "metadata": {"annotations": {
        STOPPED_AT: _stamp(now) if now is not None else None}}}


def _patch(api: Api, g: Governed, obj: KubeObject, body: dict[str, Any], detail: str,
           dry_run: bool, state: InstanceState = InstanceState.STOPPED) -> ActionResult:
    if not dry_run:
        g.obj = api.patch(obj, body)
    return _done(detail, state, dry_run)


def _cronjob(api: Api, g: Governed, obj: KubeObject, now: datetime | None,
             dry_run: bool, *, suspend: bool) -> ActionResult:
    """A CronJob and the Jobs it runs: suspended together (its GPUs are its running Jobs'),
    resumed together (the Jobs costguard suspended)."""
    what = f"CronJob {g.namespace}/{g.name}"
    if suspend and obj.suspended:
        return _skip(f"{what} is suspended already")
    if not suspend and (not obj.suspended or STOPPED_AT not in obj.annotations):
        return _skip(f"{what} was not suspended by costguard")
    jobs = [j for j in api.list("jobs") or [] if j.namespace == g.namespace
            and j.controller == ("CronJob", g.name)
            and (not j.suspended if suspend else STOPPED_AT in j.annotations)]
    if not dry_run:
        for job in jobs:
            api.patch(job, _suspend(suspend, now))
        g.obj = api.patch(obj, _suspend(suspend, now))
    names = ", ".join(j.name for j in jobs) or "no Job running"
    verb = "suspended" if suspend else "resumed"
    return _done(f"{verb} {what} and its Jobs ({names})",
                 InstanceState.STOPPED if suspend else InstanceState.RUNNING, dry_run)
