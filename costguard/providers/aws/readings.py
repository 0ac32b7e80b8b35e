"""CloudWatch GPU and CPU readings for `AwsProvider`: series discovery, batched queries.

A mixin, so the provider keeps one object (its clients, accounts and the hosts its inventory
recorded) while this concern lives in its own module.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.clock import Clock, utc
from costguard.errors import ProviderError
from costguard.minute_rows import INSTANCE, MINUTE, SPAN, MinuteRows
from costguard.model import Gap, GpuMinute, Instance
from costguard.providers.aws import host_metrics as hm
from costguard.providers.aws import metrics as cw
from costguard.providers.aws.gpu_types import GpuTypeCatalog
from costguard.providers.aws.instance_xml import lean_records
from costguard.providers.aws.inventory import HostNames, host_names
from costguard.providers.aws.sessions import AccountScope, ClientFactory
from costguard.providers.aws.settings import AwsSettings
from costguard.providers.base import Decided, Readings, Split, receipt_of
from costguard.providers.cloud_readings import Dropped, validated
from costguard.providers.repeats import Receipt, Repeats

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

log = logging.getLogger(__name__)

# ListMetrics results are reused for up to an hour while no instance appears that the
# listing was not taken for
LISTED_FRESH = timedelta(hours=1)
DimensionSets = set[tuple[tuple[str, str], ...]]
CpuSeries = dict[str, dict[datetime, float]]


class CloudWatchReads:
    """`gpu_metrics` and `cpu_metrics` of the AWS provider (state set by its __init__)."""

    settings: AwsSettings
    clock: Clock
    clients: ClientFactory
    gpu_types: GpuTypeCatalog
    metric_gaps: list[Gap]  # scopes whose metrics could not be read, last call
    get_metric_data_calls: int  # GetMetricData calls made, last gpu/cpu call
    metrics_settle: timedelta  # the span each cycle asks again (the provider's)
    _lock: threading.Lock
    _repeats: Repeats  # readings handed over and stored, to leave out unchanged repeats
    _hosts: dict[str, HostNames]
    _span: timedelta | None  # None: as long as a call's datapoint limit holds
    # (listed at, dimension sets, the instance ids it was taken for)
    _listed: dict[tuple[str, str, str, str, bool],
                  tuple[datetime, DimensionSets, frozenset[str]]]

    def _account(self, account_id: str) -> AccountScope:
        raise NotImplementedError  # the provider's

    def gpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> Sequence[GpuMinute]:
        """See `Provider.gpu_metrics`; after `readings_stored`, a later call leaves out the
        readings that come back unchanged (`costguard.providers.repeats`)."""
        return self._gpu_metrics(instances, start, end, None)

    def gpu_metrics_split(
        self, instances: Sequence[Instance], start: datetime, end: datetime, mid: datetime,
        decided: Decided,
    ) -> Sequence[GpuMinute]:
        """`costguard.providers.base.ReadsWindowOnce`: CloudWatch bills every metric a call
        requests, each time, and a second read is a second round of calls per scope. A
        first cycle's window is read once; the minutes before `mid` of the instances
        `decided` names are then neither built nor returned (those in the settling span,
        asked again next cycle, are kept). An hour of 5-minute points fits one call's
        datapoint limit: one call per 500 series, where two reads made two. A window too
        long for one call is read in spans, each asking the metrics again: a first cycle
        pays that once."""
        keep_from = min(mid, end - self.metrics_settle)
        return self._gpu_metrics(instances, start, end, (keep_from, decided))

    def _gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime,
                     split: Split | None) -> Sequence[GpuMinute]:
        first, last = cw.window(start, end)
        recent = utc(self.clock.now()) - first < timedelta(hours=3)
        receipt = self._repeats.begin(last)
        dropped = Dropped()
        out: list[MinuteRows] = []
        gaps: list[Gap] = []
        calls = 0
        groups = self._by_scope(instances)
        with ThreadPoolExecutor(self.settings.max_workers, "costguard-cw") as pool:
            futures = {
                key: pool.submit(self._gpu_scope, key, members, first, last, recent, receipt,
                                 split, dropped)
                for key, members in groups.items()
            }
            for (account_id, region), future in futures.items():
                try:
                    rows, n = future.result()
                except ProviderError as exc:
                    gaps.append(Gap(provider="aws", scope=f"{account_id}/{region}", error=str(exc)))
                    continue
                out.append(rows)
                calls += n
        self.metric_gaps, self.get_metric_data_calls = gaps, calls
        return Readings(MinuteRows.joined(out, cw.NAMES), gaps, receipt, dropped.count)

    def _gpu_scope(
        self,
        key: tuple[str, str],
        members: list[Instance],
        first: datetime,
        last: datetime,
        recent: bool,
        receipt: Receipt,
        split: Split | None,
        dropped: Dropped,
    ) -> tuple[MinuteRows, int]:
        account_id, region = key
        scope = f"{account_id}/{region}/cloudwatch"
        account = self._account(account_id)
        client = self.clients.cloudwatch(account, region)
        namespace = self.settings.cloudwatch.gpu_namespace
        layout = self.settings.cloudwatch.instance_dimension
        period_s = self.settings.cloudwatch.period_seconds
        wanted = {i.instance_id for i in members}
        metrics = [cw.METRIC_OF[m] for m in self.settings.cloudwatch.measurements]
        on_host: list[str] = list(self.settings.cloudwatch.host_measurements)
        rollup = self.settings.cloudwatch.rollup_by_instance
        hosts = (self._hosts_for(account, region, wanted)
                 if not rollup and layout is not True else {})

        def listed(names: Sequence[str]) -> dict[str, DimensionSets]:
            return {metric: self._dimensions(client, key, namespace, metric, scope, recent,
                                             wanted) for metric in names}

        series = (cw.rollup_series(wanted, metrics) if rollup
                  else cw.attribute_series(listed(metrics), wanted, hosts, layout))
        if not series:
            return MinuteRows(cw.NAMES, []), 0
        # the host beside the GPUs, where the agent publishes it (aws/host_metrics.py)
        with_gpu = {s.instance_id for s in series}
        host_series = ([] if not on_host else cw.rollup_series(with_gpu, on_host) if rollup
                       else hm.host_series(listed(on_host), with_gpu, hosts, layout))
        # Buckets of `period_s` start at `first`: each one that holds a datapoint covers its
        # whole period, wherever inside it the agent's sample fell.
        gpu_counts = {i.instance_id: max(1, i.gpu_count) for i in members}
        queries = cw.gpu_queries(series, namespace, period_s)
        # the host CPU of the same instances, in the same calls (no call per instance)
        cpu_ids = (sorted({s.instance_id for s in series})
                   if self.settings.cloudwatch.host_cpu else [])
        queries += cw.cpu_queries(cpu_ids, period_s)
        queries += hm.host_queries(host_series, namespace, period_s)
        values, calls = cw.get_metric_data(client, queries, first, last, scope, span=self._span)
        rows = cw.gpu_rows(
            series, values, gpu_counts=gpu_counts, period_s=period_s, first=first, last=last,
            host_cpu=cw.host_cpu_of(cpu_ids, values))
        if host_series:
            types = {i.instance_id: i.instance_type for i in members}
            hm.join_host(rows, hm.host_figures(host_series, values, {
                iid: self.gpu_types.host_memory_mib(types[iid])
                for iid in {s.instance_id for s in host_series}}))
        return _built(cw.as_rows(rows), receipt, split, scope, dropped), calls

    def _dimensions(self, client: CloudWatchClient, key: tuple[str, str], namespace: str,
                    metric: str, scope: str, recent: bool, wanted: set[str]) -> DimensionSets:
        """ListMetrics' dimension sets, reused for up to `LISTED_FRESH` while every instance
        asked about was already asked about when the listing was taken: a new instance
        brings a new listing. A series that appears later for a known instance (an agent
        installed afterwards) is found at the next listing; until then it is no data, never
        idle."""
        now = self.clock.now()
        cache_key = (*key, namespace, metric, recent)
        with self._lock:
            cached = self._listed.get(cache_key)
        if cached is not None and now - cached[0] < LISTED_FRESH and wanted <= cached[2]:
            return cached[1]
        found = cw.list_metric_dimensions(client, namespace, metric, scope,
                                          recently_active=recent,
                                          having=hm.LISTED_HAVING.get(metric))
        with self._lock:
            self._listed[cache_key] = (now, found, frozenset(wanted))
        return found

    def _hosts_for(
        self, account: AccountScope, region: str, wanted: set[str]
    ) -> dict[str, HostNames]:
        with self._lock:
            known = {i: self._hosts[i] for i in wanted if i in self._hosts}
        # EC2 instances only: a notebook instance's id is its ARN (aws/notebooks.py), and one
        # id EC2 cannot parse fails the whole DescribeInstances
        missing = sorted(i for i in wanted - set(known) if i.startswith("i-"))
        if missing:
            ec2 = self.clients.ec2(account, region)
            for chunk in range(0, len(missing), 1000):
                ids = missing[chunk : chunk + 1000]
                try:
                    with lean_records():
                        page = ec2.describe_instances(InstanceIds=ids)
                except (ClientError, BotoCoreError) as exc:  # e.g. an id gone meanwhile
                    log.info("private DNS names not refreshed: %s", type(exc).__name__)
                    continue
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        known[raw["InstanceId"]] = host_names(dict(raw))
            with self._lock:
                self._hosts.update(known)
        return known

    def cpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> CpuSeries:
        """AWS/EC2 CPUUtilization per instance per minute (percent), batched like GPU data."""
        first, last = cw.window(start, end)
        out: CpuSeries = {}
        gaps: list[Gap] = []
        calls = 0
        for (account_id, region), members in self._by_scope(instances).items():
            ids = sorted({i.instance_id for i in members})
            scope = f"{account_id}/{region}/cloudwatch"
            try:
                client = self.clients.cloudwatch(self._account(account_id), region)
                values, n = cw.get_metric_data(client, cw.cpu_queries(ids), first, last,
                                               scope, span=self._span)
            except ProviderError as exc:
                gaps.append(Gap(provider="aws", scope=scope, error=str(exc)))
                continue
            calls += n
            out.update({i: dict(points) for i, points in cw.host_cpu_of(ids, values).items()})
        self.metric_gaps, self.get_metric_data_calls = gaps, calls
        return out

    def readings_stored(self, readings: Sequence[GpuMinute]) -> None:
        """`costguard.providers.base.LeavesOutRepeats`: what a `gpu_metrics` call returned
        is stored."""
        self._repeats.stored(receipt_of(readings))

    @staticmethod
    def _by_scope(instances: Sequence[Instance]) -> dict[tuple[str, str], list[Instance]]:
        groups: dict[tuple[str, str], list[Instance]] = defaultdict(list)
        for inst in instances:
            if inst.provider == "aws":
                groups[(inst.account, inst.region)].append(inst)
        return dict(groups)


def _built(rows: list[tuple[Any, ...]], receipt: Receipt, split: Split | None, scope: str,
           dropped: Dropped) -> MinuteRows:
    """The readings of `rows` (`metrics.as_rows`), less those the settling span brought back
    unchanged (`receipt`: stored before) and those that are not valid readings
    (`cloud_readings.validated`: dropped, logged, counted). With `split` (keep_from,
    decided): the readings that cover any minute from `keep_from` on, and the older ones of
    the instances that `decided`, handed those, does not name (never checked). A 5-minute
    point that begins before `keep_from` and ends after it counts as recent, as `covering`
    counts it."""
    if split is None:
        return validated(cw.NAMES, receipt.fresh(rows), scope, dropped)
    keep_from, decided = split
    newer: list[tuple[Any, ...]] = []
    older: list[tuple[Any, ...]] = []
    for row in rows:
        ends = row[MINUTE] + row[SPAN] * cw.ONE_MINUTE
        (newer if ends > keep_from else older).append(row)
    recent = validated(cw.NAMES, receipt.fresh(newer), scope, dropped)
    skip = decided(recent)
    kept = receipt.fresh(r for r in older if r[INSTANCE] not in skip)
    return MinuteRows.joined([validated(cw.NAMES, kept, scope, dropped), recent], cw.NAMES)
