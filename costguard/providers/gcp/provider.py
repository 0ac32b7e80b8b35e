"""`GcpProvider`: Compute Engine + Cloud Monitoring behind costguard's Provider protocol."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from costguard.clock import Clock, SystemClock
from costguard.errors import ProviderError
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Gap,
    GpuMinute,
    Instance,
    InstanceKind,
    Inventory,
    PriceQuote,
    ProviderName,
)
from costguard.providers.base import Decided, FetchedPrices, Readings, Split, receipt_of
from costguard.providers.cloud_readings import Dropped
from costguard.providers.gcp import (
    actions,
    batch,
    http_batch,
    inventory,
    metrics,
    pool,
    pricing,
    projects,
    reads,
    tpus,
)
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.batch_joiner import Joiner
from costguard.providers.gcp.clients import (
    GcpClients,
    batch_transport,
    build_clients,
    make_retry,
)
from costguard.providers.gcp.groups import GroupClients
from costguard.providers.gcp.settings import GcpSettings
from costguard.providers.gcp.standing_ops import GcpStandingOps
from costguard.providers.repeats import Repeats

if TYPE_CHECKING:
    from costguard.providers.gcp.tpu_nodes import TpuNodes
    from costguard.providers.gcp.workbench import Listing, WorkbenchSide

log = logging.getLogger(__name__)


class GcpProvider(GcpStandingOps):
    """Lists every configured project concurrently (bounded by `max_workers`); a project
    that cannot be read is a `Gap` and the others go on."""

    name: ProviderName = "gcp"
    overlapping_metrics = True  # `gpu_metrics` calls may overlap (`base.Readings`)
    # metrics arrive minutes late: each cycle asks for the last 10 minutes again
    metrics_settle = timedelta(minutes=10)
    # the act stage's scope is the project: a filtered aggregatedList reads every zone and a
    # batch request holds calls to any zone (costguard.actions.batch.spanning_regions)
    calls_span_regions = True

    def __init__(
        self,
        settings: GcpSettings,
        *,
        clock: Clock | None = None,
        clients: GcpClients | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.clients = clients or build_clients(settings)
        self.retry = make_retry(settings.retry)
        self._partial = inventory.PartialListing(settings.partial_responses)
        self.metric_gaps: list[Gap] = []  # projects the last gpu_metrics call could not read
        # readings handed over and stored: unchanged ones are left out of the settling span
        self._repeats = Repeats(self.metrics_settle + timedelta(minutes=1))
        self._actions = actions.ActionContext(
            instances=self.clients.instances,
            operations=self.clients.zone_operations,
            retry=self.retry,
            operation_timeout_s=settings.operation_timeout_s,
        )
        self.groups = GroupClients(self.clients.credentials, settings.compute_endpoint,
                                   self.retry)
        self._batch = pool.BatchContext(
            actions=self._actions,
            workers=settings.batch_workers,
            page_size=settings.page_size,
            now=self.clock.now,
            disks=self._disk_client,
            retry_settings=settings.retry,
            fields=self._partial.recheck_fields,
        )
        self.tpus: TpuNodes | None = None
        if settings.tpus:  # google-cloud-tpu loads here, not with this module
            from costguard.providers.gcp import tpu_nodes

            self.tpus = tpu_nodes.TpuNodes(
                tpu_nodes.build_client(self.clients.credentials, settings.tpu_endpoint),
                retry=self.retry, timeout_s=settings.operation_timeout_s,
                workers=settings.batch_workers, page_size=settings.page_size, now=self.clock.now)
        self._governed: frozenset[str] = frozenset()  # kinds the policies govern here
        self.workbench: WorkbenchSide | None = None
        if settings.workbench:  # google-cloud-notebooks loads here, not with this module
            from costguard.providers.gcp import workbench

            self.workbench = workbench.WorkbenchSide(
                workbench.build_client(self.clients.credentials, settings.workbench_endpoint),
                retry=self.retry, timeout_s=settings.operation_timeout_s,
                workers=settings.batch_workers, page_size=settings.page_size)
        if settings.http_batch:
            session, base_url = batch_transport(self.clients.instances,
                                                settings.compute_endpoint)
            self._batch.batches = Joiner(http_batch.requests_post(session), base_url,
                                         settings.http_batch_join_ms / 1000)

    @property
    def scope_workers(self) -> int:
        """How many projects the act stage may call at once."""
        return self.settings.max_workers

    def close(self) -> None:
        """Close the HTTP sessions and the gRPC channel (the daemon keeps one provider)."""
        self.clients.instances.transport.close()  # type: ignore[no-untyped-call]
        self.clients.zone_operations.transport.close()  # type: ignore[no-untyped-call]
        self.clients.metrics.transport.close()  # type: ignore[no-untyped-call]
        self.groups.close()
        if self.tpus is not None:
            self.tpus.close()
        if self.workbench is not None:
            self.workbench.close()
        disks = getattr(self, "_disks", None)  # made by the first terminate
        if disks is not None:
            disks.transport.close()
        self.close_standing()

    def projects(self) -> tuple[list[str], list[Gap]]:
        """Configured projects plus those found under the folder/organization."""
        found, gaps = projects.discover(self.settings, self.clients.credentials)
        return sorted(set(self.settings.projects) | set(found)), gaps

    def list_instances(self) -> Inventory:
        names, gaps = self.projects()
        observed_at = self.clock.now()
        instances: list[Instance] = []
        if names:
            with ThreadPoolExecutor(max_workers=min(self.settings.max_workers, len(names))) as pool:
                results = pool.map(
                    lambda project: inventory.list_project(
                        self.clients.instances,
                        project,
                        page_size=self.settings.page_size,
                        retry=self.retry,
                        observed_at=observed_at,
                        partial=self._partial,
                    ),
                    names,
                )
                # Cloud TPU nodes: one listing a project, queued behind the VM listings so
                # they run beside them and the group sizing, not in a round of their own
                side = self.tpus
                nodes = ([pool.submit(side.list_project, p, observed_at) for p in names]
                         if side is not None else [])
                # Workbench instances: one listing a project, to tell notebooks' VMs apart
                books = self.workbench if "notebook" in self._governed else None
                benches = ([pool.submit(books.list_project, p) for p in names]
                           if books is not None else [])
                listed = list(results)
                # MIG members get their groups' sizes: two calls for a project that has any
                sized = pool.map(lambda pr: self.groups.with_sizes(pr[0], pr[1].instances),
                                 zip(names, listed, strict=True))
                listings = [f.result() for f in benches] or [{} for _ in names]
                bench_gaps: list[Gap] = []
                for result, members, listing in zip(listed, sized, listings, strict=True):
                    instances.extend(self._notebooks_among(members, listing, bench_gaps))
                    gaps.extend(result.gaps)
                unread = {g.scope for g in gaps}  # a project unread: one gap says so
                for future in nodes:
                    found = future.result()
                    instances.extend(found.instances)
                    gaps.extend(g for g in found.gaps if g.scope.split("/", 1)[0] not in unread)
                gaps.extend(g for g in bench_gaps if g.scope.split("/", 1)[0] not in unread)
        with self._batch.lock:
            self._batch.stopped_costs.clear()  # a new cycle: last cycle's are not wanted
        return Inventory(instances=instances, gaps=gaps)

    def gpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> Sequence[GpuMinute]:
        """See `Provider.gpu_metrics`. Projects whose metrics could not be read are left out
        and listed in `self.metric_gaps` (also logged); if none could be read, it raises.
        After `readings_stored`, a later call leaves out the readings that come back
        unchanged (`costguard.providers.repeats`)."""
        return self._gpu_metrics(instances, start, end, None)

    def gpu_metrics_split(
        self, instances: Sequence[Instance], start: datetime, end: datetime, mid: datetime,
        decided: Decided,
    ) -> Sequence[GpuMinute]:
        """`costguard.providers.base.ReadsWindowOnce`: ListTimeSeries reads a project's
        every series of a metric type, whichever VMs and minutes are asked."""
        keep_from = min(mid, end - self.metrics_settle)  # asked again next cycle: kept
        return self._gpu_metrics(instances, start, end, (keep_from, decided))

    def _gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime,
                     split: Split | None) -> Sequence[GpuMinute]:
        receipt = self._repeats.begin(end)
        dropped = Dropped()
        minutes, gaps = metrics.gpu_minutes(
            self.clients.metrics,
            instances,
            start,
            end,
            retry=self.retry,
            max_workers=self.settings.max_workers,
            receipt=receipt,
            split=split,
            dropped=dropped,
            host=self.settings.host_metrics,
        )
        self.metric_gaps = gaps
        for gap in gaps:
            log.warning("GPU metrics missing for %s: %s", gap.scope, gap.error)
        return Readings(minutes, gaps, receipt, dropped.count)

    def readings_stored(self, readings: Sequence[GpuMinute]) -> None:
        """`costguard.providers.base.LeavesOutRepeats`: what a `gpu_metrics` call returned
        is stored."""
        self._repeats.stored(receipt_of(readings))

    def govern(self, kinds: frozenset[str]) -> None:
        """`costguard.providers.base.GovernsKinds`: the Workbench listing is made only while
        a notebook policy names GCP (Google's label on a notebook's VM still marks it)."""
        self._governed = kinds

    @staticmethod
    def _notebooks_among(vms: list[Instance], found: Listing | Gap,
                         gaps: list[Gap]) -> list[Instance]:
        """A project's VMs, those that run Workbench instances as notebooks (by the listing,
        or by Google's label when the listing is a gap: kept in `gaps`)."""
        from costguard.providers.gcp import workbench

        if isinstance(found, Gap):
            gaps.append(found)
            found = {}
        return workbench.rekind(vms, found)

    def _bench(self, instance: Instance) -> WorkbenchSide | None:
        """The Workbench side, when `instance` is a notebook's VM."""
        if instance.kind is not InstanceKind.NOTEBOOK:
            return None
        if self.workbench is None:
            raise ProviderError("gcp", instance.account, f"{instance.name} runs a Workbench "
                                "instance and providers.gcp.workbench is false; stop it from "
                                "Vertex AI Workbench; nothing done")
        return self.workbench

    def _vm_now(self, instance: Instance) -> Callable[[], Instance | None]:
        """Reads the VM under a notebook again (its id must still be the one decided about)."""
        def read() -> Instance | None:
            return reads.describe_many(self._batch, [instance]).get(instance.instance_id)
        return read

    def _tpu(self, instance: Instance) -> TpuNodes | None:
        """The TPU side, when `instance` is a Cloud TPU node (not a Compute Engine VM)."""
        if not tpus.is_node(instance):
            return None
        if self.tpus is None:
            raise ProviderError("gcp", instance.account, f"{instance.name} is a Cloud TPU node "
                                "and providers.gcp.tpus is false; nothing done")
        return self.tpus

    @staticmethod
    def _batched(instances: Sequence[Instance]) -> tuple[list[Instance], list[Instance]]:
        """(Compute Engine VMs, acted on in batches; Cloud TPU nodes and notebooks, each
        through its own API, one at a time)."""
        vms: list[Instance] = []
        alone: list[Instance] = []
        for i in instances:
            (alone if tpus.is_node(i) or i.kind is InstanceKind.NOTEBOOK else vms).append(i)
        return vms, alone

    def _split(self, instances: Sequence[Instance]) -> tuple[list[Instance], list[Instance]]:
        """(Compute Engine VMs, Cloud TPU nodes)."""
        vms = [i for i in instances if not tpus.is_node(i)]
        return vms, [i for i in instances if tpus.is_node(i)]

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        bench = self._bench(instance)
        if bench is not None:
            return bench.power(instance, "stop", vm_now=self._vm_now(instance), dry_run=dry_run)
        side = self._tpu(instance)
        if side is not None:
            return side.power(instance, "stop", dry_run=dry_run)
        return actions.stop(self._actions, instance, dry_run=dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        bench = self._bench(instance)
        if bench is not None:
            return bench.power(instance, "start", vm_now=self._vm_now(instance),
                               dry_run=dry_run)
        side = self._tpu(instance)
        if side is not None:
            return side.power(instance, "start", dry_run=dry_run)
        return actions.start(self._actions, instance, dry_run=dry_run)

    def set_tags(
        self,
        instance: Instance,
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> ActionResult:
        side = self._bench(instance) or self._tpu(instance)
        if side is not None:
            return side.relabel(instance, tags, remove=remove, dry_run=dry_run)
        return actions.set_labels(self._actions, instance, tags, remove=remove, dry_run=dry_run)

    def _disk_client(self) -> compute_v1.DisksClient:
        from costguard.providers.gcp import terminate as term

        if getattr(self, "_disks", None) is None:
            self._disks = term.disks_client(self.clients.credentials,
                                            self.settings.compute_endpoint)
        return self._disks

    def terminate(self, instance: Instance, *, snapshot: bool, dry_run: bool) -> ActionResult:
        """Snapshot the persistent disks (when asked), then delete; see gcp/terminate.py."""
        from costguard.providers.gcp import terminate as term

        if tpus.is_node(instance):
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail=(
                f"{instance.name} is a Cloud TPU node: costguard stops single-host TPU nodes "
                "but never deletes one; delete it yourself when its work is saved"))
        if instance.kind is InstanceKind.NOTEBOOK:
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail=(
                f"{instance.name} runs a Workbench instance: costguard stops notebooks but "
                "never deletes one"))
        return term.terminate(self._actions, self._disk_client(), instance, snapshot=snapshot,
                              dry_run=dry_run)

    def scale_in(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        """Shrink the VM's managed instance group by it; see gcp/groups.py."""
        return self.groups.scale_in(instance, dry_run=dry_run)

    def resize_group(self, member: Instance, *, min_size: int, desired: int,
                     max_size: int | None, hint: str | None, dry_run: bool) -> ActionResult:
        """Set the member's MIG's target size (scale_to_zero); see gcp/groups.py."""
        return self.groups.resize_group(member, min_size=min_size, desired=desired,
                                        max_size=max_size, hint=hint, dry_run=dry_run)

    def stopped_cost(self, instance: Instance) -> PriceQuote | None:
        """What the stopped VM's persistent disks cost per hour; see gcp/disks.py. A VM
        stopped by stop_many was priced there in bulk."""
        from costguard.providers.gcp import disks

        if tpus.is_node(instance):
            # a stopped TPU node's chips bill nothing; data disks attached to it (dataDisks)
            # still would, and are not priced here: unknown, never a guess
            return None
        with self._batch.lock:
            if instance.instance_id in self._batch.stopped_costs:
                return self._batch.stopped_costs.pop(instance.instance_id)
        return disks.stopped_cost(self._actions, self._disk_client(), instance)

    def price(self, instance: Instance) -> PriceQuote | None:
        return pricing.price(instance)

    def fetch_list_prices(
        self, regions: Sequence[str], instance_types: Sequence[str]
    ) -> FetchedPrices:
        """On-demand and spot prices of accelerator-optimized types from the Cloud Billing
        Catalog API; see gcp/catalog.py."""
        from costguard.providers.gcp import catalog

        client = catalog.catalog_client(self.clients.credentials,
                                        self.settings.billing_endpoint)
        try:
            found, published = catalog.fetch_catalog_prices(
                client, regions, instance_types, retry=self.retry)
        finally:
            client.transport.close()
        return FetchedPrices(found, "gcp cloud billing catalog", published)

    # -- optional capabilities (costguard.providers.base.Describes / BatchActions) ------------
    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """The VMs through Compute Engine (a notebook's with its Workbench labels read
        again), the TPU nodes through the Cloud TPU API."""
        vms, nodes = self._split(instances)
        found = reads.describe_many(self._batch, vms) if vms else {}
        books = [i for i in vms if i.kind is InstanceKind.NOTEBOOK]
        fresh = [vm for i in books if (vm := found.get(i.instance_id)) is not None]
        if fresh and self.workbench is not None:
            found.update(self.workbench.refresh_many(fresh))
        elif fresh:  # providers.gcp.workbench is false: notebooks by Google's label alone
            from costguard.providers.gcp.workbench import as_notebook

            found.update((vm.instance_id, as_notebook(vm, None)) for vm in fresh)
        if nodes:
            found.update(self._tpu_side(nodes[0]).describe_many(nodes))
        return found

    def _tpu_side(self, node: Instance) -> TpuNodes:
        side = self._tpu(node)
        assert side is not None  # a TPU node by construction
        return side

    def stop_many(
        self, instances: Sequence[Instance], *, dry_run: bool
    ) -> dict[str, ActionResult]:
        vms, alone = self._batched(instances)
        done = batch.stop_many(
            self._batch, vms, dry_run=dry_run, request_id=lambda: str(uuid.uuid4())
        ) if vms else {}
        return done | pool.act_each(alone, lambda i: self.stop(i, dry_run=dry_run),
                                    self.settings.batch_workers)

    def set_tags_many(
        self,
        instances: Sequence[Instance],
        tags: Mapping[str, str],
        *,
        remove: Sequence[str] = (),
        dry_run: bool,
    ) -> dict[str, ActionResult]:
        vms, alone = self._batched(instances)
        done = batch.set_labels_many(self._batch, vms, tags, remove=remove,
                                     dry_run=dry_run) if vms else {}
        return done | pool.act_each(
            alone, lambda i: self.set_tags(i, tags, remove=remove, dry_run=dry_run),
            self.settings.batch_workers)
