"""The `k8s` provider: a cluster's GPU workloads as the engine governs instances.

Each cycle, per cluster with an API configured: the pods holding GPUs and their GPUs'
activity from Prometheus (k8s/read.py), the workloads, namespaces, nodes and autoscalers
from the API server (k8s/api.py), joined into `Governed` workloads (k8s/workloads.py).
A workload's price is what its pods request of their nodes (k8s/allocate.py's split of
each node's price, the node priced by its instance type and region labels with the
configured overrides and the shipped tables).

Stopping goes through the owner, each kind its own way (k8s/stops.py). A cluster without
`api` is reported (`costguard report --cluster`), never governed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from costguard.clock import Clock
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.pricing import PriceCatalog, PriceOverrides
from costguard.errors import ProviderError
from costguard.k8s import jupyterhub, stops
from costguard.k8s import queries as q
from costguard.k8s.allocate import rates_of, team_of
from costguard.k8s.api import Api, KubeApi, KubeObject
from costguard.k8s.minutes import NAMES, pod_rows
from costguard.k8s.model import ClusterRead, Pod, Workload
from costguard.k8s.prices import node_prices
from costguard.k8s.prometheus import PrometheusClient, PrometheusError
from costguard.k8s.read import devices_of, ksm_label, read_cluster, read_spans
from costguard.k8s.settings import ClusterSettings, KubernetesSettings
from costguard.k8s.workloads import NEVER, PLURALS, PROVIDER, Governed, annotation_key
from costguard.minute_rows import MinuteRows
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Gap,
    Instance,
    Inventory,
    PriceQuote,
    ProviderName,
)
from costguard.providers.base import Readings, tag_detail
from costguard.providers.cloud_readings import Dropped, validated

STATE_SPAN = timedelta(minutes=10)  # how far back a listing looks for running GPU pods
STEP = timedelta(minutes=1)
_LISTED = ("namespaces", "deployments", "statefulsets", "jobs", "cronjobs",
           "horizontalpodautoscalers", "notebooks", "nodes")


class ClusterSource(Protocol):
    """Where a cluster is read from and acted on: its Prometheus and API server
    (`LiveCluster`), or the demo's simulated cluster."""

    def read(self, start: datetime, end: datetime, step: timedelta) -> ClusterRead: ...

    def devices(self, start: datetime, end: datetime) -> int:
        """The most GPU devices (GPUs and MIG instances) that reported at once in the span:
        what a read of it holds per step."""
        ...

    def api(self) -> Api: ...


class LiveCluster:
    def __init__(self, cfg: ClusterSettings) -> None:
        self.cfg = cfg

    def _client(self) -> PrometheusClient:
        cfg = self.cfg
        return PrometheusClient(cfg.prometheus_url, cluster=cfg.name, token=cfg.bearer_token(),
                                timeout=cfg.timeout.total_seconds())

    def read(self, start: datetime, end: datetime, step: timedelta) -> ClusterRead:
        with self._client() as client:
            return read_cluster(client, self.cfg, start, end, step)

    def devices(self, start: datetime, end: datetime) -> int:
        with self._client() as client:
            found = client.query(q.device_peak(self.cfg.selector, end - start,
                                               (end - start) / 500), end)
        return int(max((s.last for s in found), default=0))

    def api(self) -> Api:
        assert self.cfg.api is not None
        return KubeApi(self.cfg.name, self.cfg.api, self.cfg.timeout.total_seconds())


@dataclass(frozen=True)
class WorkloadFigure:
    cluster: str
    namespace: str
    kind: str
    name: str
    team: str
    usd_per_hour: float
    gpus: int


@dataclass
class _Cluster:
    cfg: ClusterSettings
    source: ClusterSource
    api: Api | None = None
    governed: dict[str, Governed] = field(default_factory=dict)  # by instance id
    # the last read (the listing's, or a metrics call's): a metrics call over a span it
    # covers is answered from it, not by reading the cluster again
    read: ClusterRead | None = None


class KubernetesProvider:
    name: ProviderName = "k8s"

    def __init__(self, settings: KubernetesSettings, clock: Clock,
                 overrides: PriceOverrides | None = None,
                 sources: Mapping[str, ClusterSource] | None = None) -> None:
        self.clock = clock
        self.catalog = PriceCatalog(overrides=overrides)
        given = sources or {}
        self.clusters = {c.name: _Cluster(c, given.get(c.name) or LiveCluster(c))
                         for c in settings.clusters if c.api is not None}
        self._lock = threading.Lock()

    # -- inventory --
    def list_instances(self) -> Inventory:
        now = self.clock.now()
        out = Inventory()
        for name, cl in self.clusters.items():
            try:
                governed = self._governed(cl, now)
            except (ProviderError, PrometheusError) as exc:
                out.gaps.append(Gap(provider=PROVIDER, scope=name, error=str(exc)))
                continue
            cl.governed = {g.instance_id: g for g in governed}
            out.instances.extend(g.instance(now) for g in governed)
        return out

    def _api(self, cl: _Cluster) -> Api:
        if cl.api is None:
            cl.api = cl.source.api()
        return cl.api

    def _read(self, cl: _Cluster, start: datetime, end: datetime) -> ClusterRead:
        return cl.source.read(start, end, STEP)

    def _governed(self, cl: _Cluster, now: datetime) -> list[Governed]:
        end = now.replace(second=0, microsecond=0)
        read = cl.read = self._read(cl, end - STATE_SPAN, end)
        api = self._api(cl)
        objects = {plural: api.list(plural) or [] for plural in _LISTED}
        index = {(o.plural, o.namespace, o.name): o for objs in objects.values() for o in objs}
        namespaces = {o.name: o for o in objects["namespaces"]}
        for node in objects["nodes"]:
            if node.name in read.nodes:  # the API's labels, as KSM would name them
                read.nodes[node.name].labels.update(
                    {ksm_label(k): v for k, v in node.labels.items()})
        prices = node_prices(read.nodes.values(), self.catalog, [])
        rates = {n.name: rates_of(prices.get(n.name), n, cl.cfg.cost_weights)
                 for n in read.nodes.values()}
        hpas = _hpa_targets(objects["horizontalpodautoscalers"])
        found: dict[tuple[str, str, str], Governed] = {}
        for pod in read.pods.values():
            if pod.requests.gpu_units <= 0 or pod.key.namespace in cl.cfg.protected_namespaces:
                continue
            g = self._workload(cl, pod, index, api)
            if g is None:
                continue
            key = (g.namespace, g.kind, g.name)
            g = found.setdefault(key, g)
            g.pods.append(pod)
            last = max(pod.steps) if pod.steps else None
            rate = rates.get(pod.node)
            if rate is not None and last is not None:
                g.usd_per_hour = (g.usd_per_hour or 0.0) + rate.of(pod.steps[last])
            g.team = g.team or team_of(pod, read.namespace_labels, cl.cfg)
        # what costguard stopped stays listed, to be started again
        for obj in (o for plural in ("deployments", "statefulsets", "jobs", "cronjobs",
                                     "notebooks") for o in objects[plural]):
            kind = next(k for k, p in PLURALS.items() if p == obj.plural)
            key = (obj.namespace, kind, obj.name)
            if key in found or obj.namespace in cl.cfg.protected_namespaces:
                continue
            g = Governed(cl.cfg.name, obj.namespace, kind, obj.name, obj)
            if g.stopped():
                found[key] = g
        for (ns, kind, name), g in found.items():
            g.namespace_tags = _namespace_tags(namespaces.get(ns))
            g.hpa = hpas.get((ns, kind, name))
        return list(found.values())

    def _workload(self, cl: _Cluster, pod: Pod, index: Mapping[tuple[str, str, str],
                  KubeObject], api: Api) -> Governed | None:
        owner = pod.owner
        ns = pod.key.namespace
        if owner.kind in NEVER:
            return None
        if owner.kind == "StatefulSet":
            sts = index.get(("statefulsets", ns, owner.name))
            ctl = sts.controller if sts is not None else None
            if ctl is not None and ctl[0] == "Notebook":
                nb = index.get(("notebooks", ns, ctl[1]))
                if nb is None:  # Kubeflow's CRD unreadable: its controller, not alone
                    return self._unknown(cl, ns, owner.kind, owner.name, ctl)
                return Governed(cl.cfg.name, ns, "Notebook", ctl[1], nb)
            if ctl is not None:
                return self._unknown(cl, ns, owner.kind, owner.name, ctl)
        plural = PLURALS.get(owner.kind)
        if plural is None:
            return self._unknown(cl, ns, owner.kind, owner.name, (owner.kind, owner.name))
        obj = (api.get("pods", ns, owner.name) if plural == "pods"
               else index.get((plural, ns, owner.name)))
        if obj is None:
            return None  # gone since Prometheus saw it
        ctl = obj.controller
        if ctl is not None and owner.kind != "Pod" and ctl[0] not in ("CronJob",):
            return self._unknown(cl, ns, owner.kind, owner.name, ctl)
        if owner.kind == "Pod" and jupyterhub.is_server(obj):
            return Governed(cl.cfg.name, ns, "JupyterServer", owner.name, obj)
        return Governed(cl.cfg.name, ns, owner.kind, owner.name, obj)

    @staticmethod
    def _unknown(cl: _Cluster, ns: str, kind: str, name: str, ctl: tuple[str, str]
                 ) -> Governed:
        return Governed(cl.cfg.name, ns, kind, name, None, controller=Workload(*ctl))

    def figures(self) -> list[WorkloadFigure]:
        """Each workload of the last listing: what it costs an hour and the GPUs it holds
        (the daemon's /metrics, daemon/cost_metrics.py)."""
        return [WorkloadFigure(g.cluster, g.namespace, g.kind, g.name,
                               g.team or UNATTRIBUTED, g.usd_per_hour or 0.0, g.gpus)
                for cl in self.clusters.values() for g in cl.governed.values()]

    # -- telemetry --
    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> Readings:
        """The workloads' GPU readings from their clusters' Prometheus, as rows
        (k8s/minutes.py): a reading no reading can hold is dropped and counted."""
        wanted = {i.instance_id for i in instances}
        rows: list[tuple[Any, ...]] = []
        dropped = Dropped()
        lo_t, hi_t = start.timestamp(), end.timestamp()
        for cl in self.clusters.values():
            mine = [g for iid, g in cl.governed.items() if iid in wanted]
            if not mine:
                continue
            with self._lock:
                read = cl.read
                if read is not None and read.start <= start and end - read.end < STEP:
                    reads = [read]
                else:  # in spans no read of which outgrows its bound
                    known = devices_of(read) if read is not None else 0
                    reads = [self._read(cl, lo, hi)
                             for lo, hi in read_spans(start, end, known, STEP)]
                    cl.read = reads[-1] if len(reads) == 1 else cl.read
            found: list[tuple[Any, ...]] = []
            for g in mine:
                for each in reads:
                    found += _rows(g, each, lo_t, hi_t)
            # checked once a cluster and call: one log line for what it drops, as a cloud's
            rows += validated(NAMES, found, f"kubernetes cluster {cl.cfg.name}", dropped).rows
        return Readings(MinuteRows(NAMES, rows), [], dropped=dropped.count)

    # -- price --
    def price(self, instance: Instance) -> PriceQuote | None:
        cl = self.clusters.get(instance.account)
        g = cl.governed.get(instance.instance_id) if cl is not None else None
        if g is None or g.usd_per_hour is None:
            return None
        return PriceQuote(usd_per_hour=round(g.usd_per_hour, 6),
                          source="its pods' requests of their nodes' prices")

    # -- the re-check and the actions --
    def describe(self, instance: Instance) -> Instance | None:
        cl, g = self._find(instance)
        if g.obj is None:
            return g.instance(self.clock.now())
        fresh = self._api(cl).get(g.obj.plural, g.namespace, g.obj.name)
        if fresh is None:
            return None
        g.obj = fresh
        return g.instance(self.clock.now())

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        return {i.instance_id: self.describe(i) for i in instances}

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        cl, g = self._find(instance)
        return stops.stop(self._api(cl), g, cl.cfg, self.clock.now(), dry_run=dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        cl, g = self._find(instance)
        return stops.start(self._api(cl), g, dry_run=dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        cl, g = self._find(instance)
        if g.obj is None:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"its pods belong to {g.controller}: not annotated")
        setting = {annotation_key(k): v for k, v in tags.items()}
        removing = [annotation_key(k) for k in remove]
        shown = tag_detail(setting, removing)  # annotations are a workload's tags
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would have: {shown}")
        annotations: dict[str, str | None] = {**setting, **dict.fromkeys(removing)}
        g.obj = self._api(cl).patch(g.obj, {"metadata": {"annotations": annotations}})
        return ActionResult(outcome=ActionOutcome.DONE, detail=shown)

    def _find(self, instance: Instance) -> tuple[_Cluster, Governed]:
        cl = self.clusters.get(instance.account)
        g = cl.governed.get(instance.instance_id) if cl is not None else None
        if cl is None or g is None:
            raise ProviderError(PROVIDER, instance.account,
                                f"{instance.name} is not among this cycle's workloads")
        return cl, g


def _hpa_targets(hpas: Sequence[KubeObject]) -> dict[tuple[str, str, str], str]:
    out = {}
    for h in hpas:
        ref = h.spec.get("scaleTargetRef")
        if isinstance(ref, dict):
            out[(h.namespace, str(ref.get("kind", "")), str(ref.get("name", "")))] = h.name
    return out


def _namespace_tags(ns: KubeObject | None) -> dict[str, str]:
    """What a namespace says for all its workloads: protect and snooze."""
    if ns is None:
        return {}
    out = {}
    for source in (ns.labels, ns.annotations):
        for key in ("protect", "snooze-until"):
            if "costguard.io/" + key in source:
                out["costguard:" + key] = source["costguard.io/" + key]
    return out


def _rows(g: Governed, read: ClusterRead, start: float, end: float) -> list[tuple[Any, ...]]:
    """The workload's GPUs' readings of minutes from `start` to before `end`, numbered
    across its pods (k8s/minutes.py), not yet checked."""
    return pod_rows(g.instance_id, [(ref.requests.gpu_units, read.pods.get(ref.key))
                                    for ref in sorted(g.pods, key=lambda p: p.key)],
                    start=start, end=end)
