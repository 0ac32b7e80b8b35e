"""`AwsProvider`: EC2 inventory, stop/start/tag, prices; CloudWatch readings come from
`readings.CloudWatchReads`.

A cycle starts with `list_instances()`: it polls every (account x region) scope concurrently
with a bounded pool, records the hosts the CloudWatch agent may report, and clears the
per-cycle caches (metric series, spot prices).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import boto3

from costguard.clock import Clock, SystemClock
from costguard.errors import ProviderError
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Gap,
    Instance,
    Inventory,
    Lifecycle,
    PriceQuote,
    ProviderName,
)
from costguard.providers.aws import actions, batch, notebooks
from costguard.providers.aws.gpu_types import GpuTypeCatalog
from costguard.providers.aws.inventory import HostNames, read_scope
from costguard.providers.aws.notebook_ops import AwsNotebookOps
from costguard.providers.aws.owners import GroupSizes
from costguard.providers.aws.pricing import (
    OnDemandTable,
    fetch_on_demand_prices,
)
from costguard.providers.aws.readings import CloudWatchReads, DimensionSets
from costguard.providers.aws.sessions import AccountScope, ClientFactory
from costguard.providers.aws.settings import AwsSettings
from costguard.providers.aws.spot import SpotPrices
from costguard.providers.aws.standing_ops import AwsStandingOps
from costguard.providers.base import FetchedPrices, Memory
from costguard.providers.repeats import Repeats

GPU_TYPES_MEMORY = "gpu_types"  # the store's copy of GpuTypeCatalog.known()
UNDESCRIBED_MEMORY = "gpu_types_undescribed"  # GpuTypeCatalog.undescribed()
SPOT_MEMORY = "spot_prices"  # the spot prices read within SPOT_PRICE_TTL
log = logging.getLogger(__name__)



class AwsProvider(CloudWatchReads, AwsStandingOps, AwsNotebookOps):
    """The `costguard.providers.base.Provider` for AWS EC2."""

    name: ProviderName = "aws"
    overlapping_metrics = True  # `gpu_metrics` calls may overlap (`base.Readings`)
    # metrics arrive minutes late: each cycle asks for the last 10 minutes again
    metrics_settle = timedelta(minutes=10)

    def __init__(
        self,
        settings: AwsSettings,
        *,
        clock: Clock | None = None,
        session: boto3.Session | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.clients = ClientFactory(settings, session)
        self.gpu_types = GpuTypeCatalog(lambda: self.clock.now().date())
        self.prices = OnDemandTable()
        self._lock = threading.Lock()
        # a later call asks the settling span again; a point's minute may start a period earlier
        self._repeats = Repeats(self.metrics_settle
                                + timedelta(seconds=settings.cloudwatch.period_seconds))
        self._accounts: dict[str, AccountScope] = {}
        self._hosts: dict[str, HostNames] = {}
        self.spot = SpotPrices(settings.spot_product_description, self.clock,
                               lambda account_id, region: self.clients.ec2(
                                   self._account(account_id), region))
        self.group_sizes = GroupSizes(timedelta(minutes=settings.group_sizes_max_age_minutes))
        self._volumes: dict[str, list[dict[str, Any]]] = {}  # read by stop_many, for stopped_cost
        self._volume_reads: ThreadPoolExecutor | None = None  # beside StopInstances; see _side
        self.metric_gaps: list[Gap] = []  # scopes whose metrics could not be read, last call
        self.get_metric_data_calls = 0  # GetMetricData calls made, last gpu/cpu call
        span = settings.cloudwatch.max_span_minutes
        self._span = timedelta(minutes=span) if span else None  # None: the datapoint limit
        self._listed: dict[tuple[str, str, str, str, bool],
                           tuple[datetime, DimensionSets, frozenset[str]]] = {}
        self._memory: Memory | None = None
        self._remembered: dict[str, dict[str, Any]] = {}
        self._governed: frozenset[str] = frozenset()  # kinds the policies govern here
        self._denied_said: set[str] = set()  # accounts whose notebooks may not be listed
        self._denied_lock = threading.Lock()

    @property
    def scope_workers(self) -> int:
        """How many (account, region) scopes the act stage may call at once."""
        return self.settings.max_workers

    def attach_memory(self, memory: Memory) -> None:
        """What earlier runs learned (`costguard.providers.base.Remembers`): instance types'
        GPUs, and spot prices read less than SPOT_PRICE_TTL ago."""
        self._memory = memory
        known = memory.get(GPU_TYPES_MEMORY)
        if isinstance(known, dict):
            self.gpu_types.learn(known)
        undescribed = memory.get(UNDESCRIBED_MEMORY)
        if isinstance(undescribed, dict):
            self.gpu_types.learn_undescribed(undescribed)
        spot = memory.get(SPOT_MEMORY)
        if isinstance(spot, dict):
            self.spot.restore(spot)
        self._remembered = self._to_remember()

    def _to_remember(self) -> dict[str, dict[str, Any]]:
        return {GPU_TYPES_MEMORY: self.gpu_types.known(),
                UNDESCRIBED_MEMORY: self.gpu_types.undescribed(),
                SPOT_MEMORY: self.spot.notes()}

    def _remember(self) -> None:
        """Write what changed since the last write. Called from list_instances, outside the
        cycle's own database sessions (spot prices are read during accrual, inside one: a
        write from there would wait on SQLite's single writer)."""
        if self._memory is None:
            return
        for name, now in self._to_remember().items():
            if now != self._remembered.get(name):
                self._memory.put(name, now)
                self._remembered[name] = now

    # -- inventory -------------------------------------------------------------------------

    def list_instances(self) -> Inventory:
        observed_at = self.clock.now()
        self.spot.forget_old(observed_at)
        try:
            accounts = self.clients.accounts()
        except ProviderError as exc:
            return Inventory(gaps=[Gap(provider="aws", scope="accounts", error=str(exc))])
        gaps: list[Gap] = []
        scopes: list[tuple[AccountScope, str]] = []
        with ThreadPoolExecutor(self.settings.max_workers, "costguard-aws") as pool:
            region_lists = {a.account_id: pool.submit(self._regions_of, a) for a in accounts}
            for account in accounts:
                regions = region_lists[account.account_id].result()
                if isinstance(regions, Gap):
                    gaps.append(regions)
                    continue
                scopes += [(account, region) for region in regions]
            futures = [pool.submit(self._read, a, r, observed_at) for a, r in scopes]
            # SageMaker notebook instances, queued behind the scopes' EC2 listings
            futures += [pool.submit(self._read_notebooks, a, r, observed_at)
                        for a, r in scopes if self._lists_notebooks(r)]
            instances: list[Instance] = []
            for future in futures:
                got = future.result()
                if isinstance(got, Gap):
                    gaps.append(got)
                else:
                    instances += got
        with self._lock:
            self._accounts.update({a.account_id: a for a in accounts})
        self._remember()
        return Inventory(instances=instances, gaps=gaps)

    def _regions_of(self, account: AccountScope) -> list[str] | Gap:
        try:
            self.clients.credentials_for(account)  # assume the role once, before its regions
            return self.clients.regions(account)
        except ProviderError as exc:
            self.clients.forget(account)
            return Gap(provider="aws", scope=account.account_id, error=str(exc))

    def _read(
        self, account: AccountScope, region: str, observed_at: datetime
    ) -> list[Instance] | Gap:
        scope = f"{account.account_id}/{region}"
        try:
            result = read_scope(
                self.clients.ec2(account, region),
                account=account.account_id,
                region=region,
                catalog=self.gpu_types,
                observed_at=observed_at,
                autoscaling=lambda: self.clients.autoscaling(account, region),
                group_sizes=self.group_sizes,
            )
        except ProviderError as exc:
            log.warning("aws scope %s not read: %s", scope, exc)
            return Gap(provider="aws", scope=scope, error=str(exc))
        with self._lock:
            self._hosts.update(result.hosts)
        self.spot.prefetch(account.account_id, region, result.instances, observed_at)
        return result.instances

    def _account(self, account_id: str) -> AccountScope:
        with self._lock:
            known = self._accounts.get(account_id)
        if known is not None:
            return known
        configured = {a.id: a for a in self.settings.accounts}
        if account_id == self.clients.own_account() and (
            account_id not in configured or configured[account_id].role_arn is None
        ):
            return AccountScope(account_id, None)
        ref = configured.get(account_id)
        role = (
            ref.role_arn
            if ref and ref.role_arn
            else (f"arn:aws:iam::{account_id}:role/{self.settings.role_name}")
        )
        return AccountScope(account_id, role)

    # -- actions ---------------------------------------------------------------------------

    def _ec2_for(self, instance: Instance) -> Any:
        return self.clients.ec2(self._account(instance.account), instance.region)

    def _act(self, instance: Instance, run: Any) -> ActionResult:
        try:
            ec2 = self._ec2_for(instance)
        except ProviderError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
        result: ActionResult = run(ec2)
        return result

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        if notebooks.is_notebook(instance):
            return self.notebook_power(instance, "stop", dry_run=dry_run)
        return self._act(instance, lambda ec2: actions.stop(ec2, instance, dry_run=dry_run))

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        if notebooks.is_notebook(instance):
            return self.notebook_power(instance, "start", dry_run=dry_run)
        return self._act(instance, lambda ec2: actions.start(ec2, instance, dry_run=dry_run))

    def set_tags(
        self,
        instance: Instance,
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> ActionResult:
        if notebooks.is_notebook(instance):
            return self.notebook_tags(instance, tags, remove, dry_run=dry_run)
        return self._act(
            instance, lambda ec2: actions.set_tags(ec2, instance, tags, remove, dry_run=dry_run)
        )

    def terminate(self, instance: Instance, *, snapshot: bool, dry_run: bool) -> ActionResult:
        """Snapshot the EBS volumes (when asked), then terminate; see aws/terminate.py."""
        from costguard.providers.aws import terminate as term

        return self._act(instance, lambda ec2: term.terminate(
            ec2, instance, snapshot=snapshot, dry_run=dry_run))

    def stopped_cost(self, instance: Instance) -> PriceQuote | None:
        """What the stopped instance's EBS volumes cost per hour; see aws/disks.py. (A
        stopped notebook instance's ML storage is not priced: None.)"""
        from costguard.providers.aws import disks

        if notebooks.is_notebook(instance):
            return None
        with self._lock:
            read = self._volumes.pop(instance.instance_id, None)
        if read is not None:  # read in bulk right after stop_many
            return disks.stopped_cost(batch.Prefetched(read), instance)  # type: ignore[arg-type]
        try:
            ec2 = self._ec2_for(instance)
        except ProviderError:
            return None
        return disks.stopped_cost(ec2, instance)

    def scale_in(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        """Shrink the instance's Auto Scaling group by it; see aws/groups.py."""
        from costguard.providers.aws import groups

        scope = f"{instance.account}/{instance.region}"
        if instance.owner is not None and not dry_run:
            self.group_sizes.forget(scope, instance.owner.name)
        try:
            client = self.clients.autoscaling(self._account(instance.account), instance.region)
            return groups.scale_in(client, instance, dry_run=dry_run, scope=scope)
        except ProviderError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))

    def resize_group(self, member: Instance, *, min_size: int, desired: int, max_size: int,
                     hint: str | None, dry_run: bool) -> ActionResult:
        """Set the member's Auto Scaling group's sizes (scale_to_zero); see aws/groups.py."""
        from costguard.providers.aws import groups

        scope = f"{member.account}/{member.region}"
        if member.owner is not None and not dry_run:
            self.group_sizes.forget(scope, member.owner.name)
        try:
            client = self.clients.autoscaling(self._account(member.account), member.region)
            return groups.resize_group(client, member, min_size=min_size, desired=desired,
                                       max_size=max_size, hint=hint, dry_run=dry_run,
                                       scope=scope)
        except ProviderError as exc:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))

    # -- batched re-check and actions (base.Describes, base.BatchActions) ------------------

    def describe(self, instance: Instance) -> Instance | None:
        """The instance as EC2 shows it now (None: gone), for `safety.recheck`."""
        return self.describe_many([instance]).get(instance.instance_id)

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """One DescribeInstances per (account, region) chunk of up to 1,000 ids; notebook
        instances read from SageMaker."""
        out = self.describe_notebooks([i for i in instances if notebooks.is_notebook(i)])
        now = self.clock.now()
        vms = [i for i in instances if not notebooks.is_notebook(i)]
        for (account_id, region), members in self._by_scope(vms).items():
            ec2 = self.clients.ec2(self._account(account_id), region)
            out |= batch.describe_many(ec2, members, observed_at=now)
        return out

    def stop_many(
        self, instances: Sequence[Instance], *, dry_run: bool
    ) -> dict[str, ActionResult]:
        def stop(ec2: Any, members: Sequence[Instance], scope: str) -> dict[str, ActionResult]:
            # the action alerts price the stopped instances' disks: one DescribeVolumes per
            # 200 ids, read while StopInstances is in flight (a stop leaves its volumes
            # attached), instead of one per instance there
            plain = [i.instance_id for i in members if i.owner is None]
            reading = (self._side().submit(batch.volumes_by_instance, ec2, plain, scope)
                       if plain and not dry_run else None)
            results = batch.stop_many(ec2, members, dry_run=dry_run, scope=scope)
            volumes = reading.result() if reading is not None else {}
            stopped = {i for i, r in results.items() if r.outcome is ActionOutcome.DONE}
            with self._lock:
                self._volumes.update((i, v) for i, v in volumes.items() if i in stopped)
            return results

        return self._per_scope(instances, stop, lambda i: self.notebook_power(
            i, "stop", dry_run=dry_run))

    def _side(self) -> ThreadPoolExecutor:
        """The threads that read volumes beside StopInstances: one per scope stopped at once
        (the act stage's scope workers), started when first needed and kept."""
        with self._lock:
            if self._volume_reads is None:
                self._volume_reads = ThreadPoolExecutor(self.settings.max_workers,
                                                        "costguard-aws-volumes")
            return self._volume_reads

    def set_tags_many(
        self,
        instances: Sequence[Instance],
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> dict[str, ActionResult]:
        return self._per_scope(
            instances, lambda ec2, members, scope: batch.set_tags_many(
                ec2, members, tags, remove, dry_run=dry_run, scope=scope),
            lambda i: self.notebook_tags(i, tags, remove, dry_run=dry_run))

    def _per_scope(self, instances: Sequence[Instance], run: Any,
                   notebook: Callable[[Instance], ActionResult]) -> dict[str, ActionResult]:
        """`run` per scope on its EC2 instances; `notebook` on each notebook instance
        (SageMaker acts on one at a time)."""
        out = {i.instance_id: notebook(i) for i in instances if notebooks.is_notebook(i)}
        for (account_id, region), members in self._by_scope(
                [i for i in instances if not notebooks.is_notebook(i)]).items():
            try:
                ec2 = self.clients.ec2(self._account(account_id), region)
            except ProviderError as exc:
                failed = ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
                out |= dict.fromkeys((i.instance_id for i in members), failed)
                continue
            out |= run(ec2, members, f"{account_id}/{region}")
        return out

    # -- prices ----------------------------------------------------------------------------

    def price(self, instance: Instance) -> PriceQuote | None:
        on_demand = self.prices.lookup(instance.region, instance.instance_type)
        if instance.lifecycle is Lifecycle.SPOT:
            spot = self.spot.lookup(instance)
            if spot is not None:
                return PriceQuote(usd_per_hour=spot, source="aws spot price history",
                                  as_of=self.clock.now().date())
            if on_demand is not None:
                return PriceQuote(
                    usd_per_hour=on_demand.usd_per_hour,
                    source=f"{on_demand.source}; spot price unknown, on-demand as upper bound",
                    as_of=on_demand.as_of, fallback=True,
                )
            return None
        if on_demand is None:
            return None
        return PriceQuote(usd_per_hour=on_demand.usd_per_hour, source=on_demand.source,
                          as_of=on_demand.as_of, fallback=on_demand.fallback)

    def fetch_list_prices(
        self, regions: Sequence[str], instance_types: Sequence[str]
    ) -> FetchedPrices:
        """On-demand Linux prices from the Price List API (spot has no list price on AWS:
        it is read from spot price history each cycle)."""
        found, published = fetch_on_demand_prices(
            self.clients.pricing(), list(regions), list(instance_types))
        return FetchedPrices(
            {(region, itype, str(Lifecycle.ON_DEMAND)): usd
             for (region, itype), usd in found.items()},
            "aws price list api", published)
