"""One governance cycle, each stage through the store, with an injected clock."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlmodel import select

from costguard.actions.runner import ActionRunner, FaultHook
from costguard.actions.stats import ActStats
from costguard.alerts.console import AlertPrinter
from costguard.alerts.dispatcher import dispatch
from costguard.alerts.gaps import METRICS_SCOPE, record_gaps
from costguard.clock import Clock
from costguard.config import Settings
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.price_book import PriceBook
from costguard.costs.pricing import PriceCatalog, PriceOverrides
from costguard.engine import behind, cycle_rows
from costguard.engine.backfill import Fetch, catch_up, fetch_cold
from costguard.engine.collect import collect, each_provider
from costguard.engine.fetch import fetcher
from costguard.engine.summary import CycleSummary
from costguard.engine.verdicts import Verdicts
from costguard.errors import ProviderError
from costguard.heap import (
    cycle_collection,
    limit_malloc_arenas,
    release_freed_memory,
    skip_collection_at_exit,
)
from costguard.minutes import has_source
from costguard.model import Gap, GpuMinute, Instance, InstanceState, TelemetrySource
from costguard.policy.evaluate import Finding, judge, matches
from costguard.policy.kinds import KINDS
from costguard.policy.schema import PolicySet
from costguard.policy.stop_check import check_stops, held_back, needs_check
from costguard.providers.base import Provider, Readings, ReadsWindowOnce, Remembers
from costguard.standing.act import StandingRunner
from costguard.standing.stage import govern
from costguard.store import control
from costguard.store.db import Database
from costguard.store.inventory import current_instances
from costguard.store.memory import StoreMemory
from costguard.store.readings import instances_with_source, write_minutes
from costguard.store.refs import InstanceRef
from costguard.store.tables import CycleRow, InstanceRow
from costguard.store.window import ReadingWindow, SpanReader

if TYPE_CHECKING:
    from costguard.costs.hourly_checks import HourlyChecks

log = logging.getLogger("costguard.engine")

MAX_TELEMETRY_LOOKBACK = timedelta(hours=6)
AGENT_FRESH = timedelta(minutes=10)
# how far back the reading window holds a kind no idle policy governs, and the least a
# first cycle reads
DEFAULT_WINDOW = timedelta(hours=1)
STAGE_ORDER = ("collect", "telemetry", "window", "accrue", "efficiency", "evaluate", "act",
               "standing", "spend", "alert")


class Engine:
    def __init__(
        self, settings: Settings, db: Database, providers: Mapping[str, Provider],
        policies: PolicySet, clock: Clock, *, fault: FaultHook | None = None,
        alert_printer: AlertPrinter | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.providers = dict(providers)
        self.policies = policies
        self.clock = clock
        self.attributor = Attributor(policies.attribution)
        self.runner = ActionRunner(db, self.providers, self.attributor, fault,
                                   safety=settings.safety)
        self.standing_runner = StandingRunner(db, self.providers, self.attributor)
        self.alert_printer = alert_printer
        self.window = ReadingWindow()
        self._inventory: list[Instance] | None = None
        self._spend_checked: datetime | None = None
        # what the hourly budget and anomaly checks read, kept from one to the next
        self._checks: HourlyChecks | None = None
        self._memories_attached = False
        self.verdicts = Verdicts()  # what an `underused:` condition reads (engine/verdicts.py)
        self._store = threading.Lock()  # the telemetry stage's writes, one provider at a time
        for name, provider in self.providers.items():  # base.GovernsKinds, where a provider is
            govern = getattr(provider, "govern", None)
            if govern is not None:
                govern(frozenset(p.resource for p in policies.policies if name in p.providers))
        overrides_file = settings.costs.price_overrides
        self.catalog = PriceCatalog(
            {n: p.price for n, p in self.providers.items()},
            PriceOverrides.load(overrides_file) if overrides_file else None)

    # -- the cycle --------------------------------------------------------------------
    def run_cycle(self) -> CycleSummary:
        limit_malloc_arenas()  # once per process, before the cycle's threads (costguard/heap.py)
        skip_collection_at_exit()  # once per process (costguard/heap.py)
        try:
            with cycle_collection():  # fewer walks of a cycle's live objects (costguard/heap.py)
                return self._run_cycle()
        finally:
            # the inventory is read anew by the next cycle: held between cycles, its models
            # (~2 KB an instance) pinned the heap the cycle freed around them
            self._inventory = None
            release_freed_memory()  # else the cycle's peak stays resident (costguard/heap.py)

    def _run_cycle(self) -> CycleSummary:
        now = self.clock.now()
        with self.db.session() as s:
            row = CycleRow(started_at=now, summary={"runner": cycle_rows.runner()})
            s.add(row)
            s.flush()
            cycle_id = row.id or 0
            abandoned = cycle_rows.close_abandoned(s, cycle_id, now, self._stale_after())
        summary = CycleSummary(cycle_id=cycle_id, started_at=now)
        summary.abandoned_cycles = abandoned
        self._inventory = None  # read once, after collect, for telemetry and evaluation
        try:
            self._stage(summary, "collect", lambda: self._collect(summary, now))
            self._stage(summary, "telemetry", lambda: self._telemetry(summary, now))
            self._stage(summary, "window", lambda: self._refresh_window(now))
            self._stage(summary, "accrue", lambda: self._accrue(summary, now))
            self._stage(summary, "efficiency", lambda: self._efficiency(summary, now))
            findings: list[Finding] = []
            self._stage(summary, "evaluate", lambda: findings.extend(self._evaluate(now)))
            summary.findings = dict(Counter(f.policy.name for f in findings if f.holds))
            summary.held_back = dict(Counter(f.policy.name for f in findings if held_back(f)))
            self._stage(summary, "act", lambda: self._act(summary, findings, now, cycle_id))
            self._stage(summary, "standing", lambda: self._standing(summary, now, cycle_id))
            self._stage(summary, "spend", lambda: self._spend(summary, now))
            self._stage(summary, "alert", lambda: self._alert(summary, now))
        except BaseException as exc:
            self._end_badly(cycle_id, summary, exc)
            raise
        with self.db.session() as s:
            cycle_rows.end(s, cycle_id, "ok", self.clock.now(), summary=summary.as_dict())
        return summary

    def _stale_after(self) -> timedelta:
        """How long another host's `running` cycle may be live (engine/cycle_rows.py)."""
        return max(timedelta(hours=1), 3 * self.settings.poll_interval)

    def _end_badly(self, cycle_id: int, summary: CycleSummary, exc: BaseException) -> None:
        """`interrupted` (Ctrl-C) or `failed`; when even that cannot be written (the store
        is down, or locked by the interrupted write), the next cycle closes it as abandoned."""
        interrupted = isinstance(exc, KeyboardInterrupt)
        stage = next((s for s in STAGE_ORDER if s not in summary.stage_seconds), "alert")
        status, error = (("interrupted", f"interrupted (Ctrl-C) in the {stage} stage")
                         if interrupted else ("failed", f"{type(exc).__name__}: {exc}"))
        if interrupted:
            # the interrupted session's connection may still hold SQLite's write lock
            self.db.engine.dispose()
        try:
            with self.db.session() as s:
                cycle_rows.end(s, cycle_id, status, self.clock.now(), error=error)
        except Exception as write_error:
            log.warning("cycle %s could not be marked %s (%s): the next cycle closes it as "
                        "abandoned", cycle_id, status, type(write_error).__name__)

    def _stage(self, summary: CycleSummary, name: str, fn: Callable[[], object]) -> None:
        t0, cpu0 = time.perf_counter(), time.process_time()
        fn()
        summary.stage_seconds[name] = round(time.perf_counter() - t0, 4)
        summary.stage_cpu_seconds[name] = round(time.process_time() - cpu0, 4)
        log.debug("cycle %s stage %s took %.3fs", summary.cycle_id, name,
                  summary.stage_seconds[name])

    def _collect(self, summary: CycleSummary, now: datetime) -> None:
        if not self._memories_attached:  # once, at the first cycle: the store is ready then
            for name, provider in self.providers.items():
                if isinstance(provider, Remembers):
                    provider.attach_memory(StoreMemory(self.db, name, self.clock))
            self._memories_attached = True
        summary.instances, gaps = collect(self.db, self.providers, now)
        summary.gaps = [g.model_dump(mode="json") for g in gaps]

    def _telemetry(self, summary: CycleSummary, now: datetime) -> None:
        lookback = max(self._longest_idle_window(), DEFAULT_WINDOW)
        floor = now - MAX_TELEMETRY_LOOKBACK
        # what is read for the span before the window (a downtime's) is stored, not held
        instances = self._current_instances()
        self.window.expect(self._window_start(now), self._window_starts(
            now, (((i.provider, i.instance_id), i.kind) for i in instances if i.has_gpu)))
        with self.db.session() as s:
            agent = instances_with_source(s, TelemetrySource.AGENT, now - AGENT_FRESH)

        def read(named: tuple[str, Provider]) -> list[Gap]:
            return self._provider_telemetry(summary, *named, now, lookback, floor, instances,
                                            agent)

        # every provider read at once (engine/collect.py), the store written one at a time
        for gaps in each_provider(list(self.providers.items()), read):
            summary.gaps += [g.model_dump(mode="json") for g in gaps]

    def _provider_telemetry(
        self, summary: CycleSummary, name: str, provider: Provider, now: datetime,
        lookback: timedelta, floor: datetime, instances: list[Instance],
        agent: set[tuple[str, str]],
    ) -> list[Gap]:
        """One provider's GPU metrics since its watermark; returns its metrics gaps. Runs
        beside the other providers': every store write here holds `self._store`."""
        key = f"telemetry_until:{name}"
        with self._store, self.db.session() as s:
            since = control.get_time(s, key)
            # scopes whose metrics failed while the rest answered (engine/behind.py)
            lagging = behind.load(s, name) if since is not None else {}
        start = max(since or now - lookback, floor)
        wanted = [i for i in instances if i.provider == name and i.has_gpu
                  and i.state is InstanceState.RUNNING
                  and (i.provider, i.instance_id) not in agent]
        gaps: list[Gap] = []
        asked: list[tuple[Instance, datetime, bool]] = []  # instance, start, call raised
        if wanted and start < now:
            fetch = fetcher(name, provider, self._sink(summary, name), len(self.providers))
            on_time, late = behind.plan(wanted, start, lagging, floor)
            try:
                if since is None:  # a first cycle: each window's history where it matters
                    gaps = self._fetch_cold(fetch, on_time, now, floor,
                                            read_once=isinstance(provider, ReadsWindowOnce))
                elif on_time:
                    gaps = fetch(on_time, start, now, None)
            except ProviderError as exc:
                # no readings is "no data", never "idle": record the gap, keep going, and
                # leave the watermark so the next cycle asks for this span again
                log.warning("telemetry gap: %s", exc)
                gaps = [Gap(provider=name, scope=exc.scope + METRICS_SCOPE, error=str(exc))]
                # scopes still behind were not read either: their gaps stay open
                gaps += [Gap(provider=name, scope=scope + METRICS_SCOPE,
                             error=f"not read this cycle: {exc}")
                         for scope in sorted(lagging) if scope != exc.scope]
                wanted = []
            else:
                asked += [(i, start, False) for i in on_time]
                for late_start, members in late:  # behind scopes, from where they were
                    more_gaps, raised = catch_up(name, fetch, members, late_start, now, lagging)
                    gaps += more_gaps
                    asked += [(i, late_start, raised) for i in members]
                gaps = list({g.scope: g for g in gaps}.values())  # one gap per scope
        with self._store, self.db.session() as s:
            record_gaps(s, name, gaps, now, metrics=True)
        if not wanted and gaps:
            return gaps
        # a cloud's metrics arrive late: ask for the last `metrics_settle` again next time
        settle: timedelta = getattr(provider, "metrics_settle", timedelta(0))
        until = max(start, now - settle) if wanted else now
        now_behind = behind.update(
            lagging, asked, [g.scope.removesuffix(METRICS_SCOPE) for g in gaps],
            [i for i in instances if i.provider == name], floor)
        with self._store, self.db.session() as s:  # readings were stored as they arrived
            control.put(s, key, until.isoformat(), now)
            behind.save(s, name, now_behind, now)
        return gaps

    def _fetch_cold(self, fetch: Fetch, wanted: list[Instance], now: datetime,
                    floor: datetime, *, read_once: bool) -> list[Gap]:
        """A first cycle's read: each kind's instances over what its idle policies look back
        on (an hour at least), where their recent minutes leave it undecided (`fetch_cold`);
        kinds that look back as far are read together."""
        windows = self._idle_windows()
        groups: dict[timedelta, list[Instance]] = defaultdict(list)
        for inst in wanted:
            groups[max(windows.get(inst.kind, DEFAULT_WINDOW), DEFAULT_WINDOW)].append(inst)
        gaps: list[Gap] = []
        for span, members in sorted(groups.items()):
            kinds = {inst.kind for inst in members}
            conditions = [p.condition.idle for p in self.policies.policies
                          if p.condition.idle and p.resource in kinds]
            gaps += fetch_cold(fetch, members, max(now - span, floor), now, conditions,
                               read_once=read_once)
        return list({g.scope: g for g in gaps}.values())  # one gap per scope

    def _current_instances(self) -> list[Instance]:
        """The inventory as collect left it; nothing changes it before the act stage."""
        if self._inventory is None:
            with self.db.session() as s:
                self._inventory = current_instances(s)
        return self._inventory

    def _sink(self, summary: CycleSummary, name: str
              ) -> Callable[[Sequence[GpuMinute], datetime], None]:
        """Store a call's readings and feed them to the window, as they arrive; count what
        provider `name`'s call dropped (one call at a time: `fetcher`'s handover)."""
        def sink(readings: Sequence[GpuMinute], since: datetime) -> None:
            if isinstance(readings, Readings) and readings.dropped:
                summary.readings_dropped[name] = (summary.readings_dropped.get(name, 0)
                                                  + readings.dropped)
            if readings:
                with self._store, self.db.session() as s:
                    summary.readings += write_minutes(s, readings)
                self.window.add(readings, since=since)
        return sink

    def _idle_windows(self) -> dict[str, timedelta]:
        """Each resource kind's longest idle window: how far back the policies that govern
        it (`resource:`) look. A kind no idle policy governs is held an hour."""
        windows: dict[str, timedelta] = {}
        for p in self.policies.policies:
            if p.condition.idle:
                windows[p.resource] = max(windows.get(p.resource, timedelta(0)),
                                          p.condition.idle.for_)
        return windows

    def _longest_idle_window(self) -> timedelta:
        return max(self._idle_windows().values(), default=DEFAULT_WINDOW)

    def _window_start(self, now: datetime) -> datetime:
        """Where the reading window's span begins: what the idle policies look back on."""
        return now - self._longest_idle_window()

    def _window_starts(self, now: datetime, kinds: Iterable[tuple[InstanceRef, str]]
                       ) -> dict[InstanceRef, datetime]:
        """Where each instance's span in the reading window begins: what the idle policies
        of its kind look back on. One kind's longer window (notebooks': 2 hours) held every
        instance's readings that long, twice the daemon's memory at 10,000 instances."""
        windows = self._idle_windows()
        return {ref: now - windows.get(kind, DEFAULT_WINDOW) for ref, kind in kinds}

    def _refresh_window(self, now: datetime) -> None:
        """Load the readings evaluation (and accrual, since the last cycle) need, once,
        incrementally; an older span accrual charges (a downtime's) is read from the store
        a batch at a time (`_accrue`)."""
        with self.db.session() as s:
            rows = s.exec(select(InstanceRow.provider, InstanceRow.instance_id,
                                 InstanceRow.kind).where(InstanceRow.gpu_count > 0)).all()
            starts = self._window_starts(now, (((p, i), k) for p, i, k in rows))
            self.window.refresh(s, list(starts), self._window_start(now), now, starts)

    def _accrue(self, summary: CycleSummary, now: datetime) -> None:
        acct = self.settings.accounting
        with self.db.session() as s:
            # refreshed list prices and rates learned from bills, as the store has them now
            self.catalog.book = PriceBook.load(s)
            stats = accrue(s, now, self.catalog.price_of(), self.attributor,
                           idle_signal=acct.idle_signal, idle_below=acct.idle_below,
                           minutes_of=SpanReader(s, now, self.window,
                                                 agent_only=acct.idle_evidence == "agent"),
                           disk_price_of=self.catalog.disk,
                           instances={(i.provider, i.instance_id): i
                                      for i in self._current_instances()})
        summary.accrued_usd = round(stats.cost_micros / 1e6, 2)
        summary.idle_usd = round(stats.idle_cost_micros / 1e6, 2)

    def _efficiency(self, summary: CycleSummary, now: datetime) -> None:
        """Renew the efficiency verdicts that are due, keep those an `underused:` condition
        reads, and enqueue the week's underused-GPU digests when it is time."""
        base = self.settings.recommend
        with self.db.session() as s:
            summary.judged, summary.digests = self.verdicts.renew(
                s, base, self.policies.policies, self._current_instances(), now,
                self.catalog.quote)
        self.verdicts.enqueued(base, now)

    def price(self, inst: Instance) -> float:
        quote = self.catalog.quote(inst)
        return quote.usd_per_hour if quote else 0.0

    def _evaluate(self, now: datetime) -> list[Finding]:
        instances = self._current_instances()
        start = self._window_start(now)
        findings: list[Finding] = []
        prices: dict[tuple[str, str], float] = {}
        verdicts = self.verdicts.by_policy(self.settings.recommend, self.policies.policies)
        # only an idle condition reads GPU-minutes: without one, none are built
        reads = any(p.condition.idle for p in self.policies.policies)
        agents: set[tuple[str, str]] = set()  # stop checks' instances with agent readings
        for inst in instances:
            ref = (inst.provider, inst.instance_id)
            # one instance's readings at a time: the window keeps them packed
            minutes = self.window.minutes(ref, start, now) if reads else []
            for n, policy in enumerate(self.policies.policies):
                if not matches(policy, inst, now):
                    continue
                # priced only where a policy selects it: a price may be a call (a spot type
                # not read yet) and is a lookup either way
                if ref not in prices:
                    prices[ref] = self.price(inst)
                v = verdicts[n].get(ref) if n in verdicts else None
                f = judge(policy, inst, minutes, now, prices[ref], v)
                findings.append(f)
                if (ref not in agents and needs_check(f)
                        and has_source(minutes, TelemetrySource.AGENT)):
                    agents.add(ref)
        # the stop's checks on the stored readings (policy/stop_check.py)
        out = check_stops(self.db, self.policies.policies, findings, start, now, agents)
        for f in out:
            if held_back(f):
                log.info("%s (%s): %s", f.instance.instance_id, f.policy.name, f.reason)
        return out

    def _act(self, summary: CycleSummary, findings: list[Finding], now: datetime,
             cycle_id: int) -> None:
        with self.db.session() as s:
            paused = self.settings.paused or control.is_paused(s)
        summary.paused = paused
        if paused:
            log.warning("paused: no action taken this cycle (costguard resume to re-enable)")
            summary.actions = ActStats().as_dict()
            return
        # volume, snapshot and address policies act in the standing stage; the runner
        # keeps nothing it read for the next cycle (actions/runner.py `run`)
        compute = [p for p in self.policies.policies if not KINDS[p.resource].standing]
        stats = self.runner.run(compute, findings, now, cycle_id)
        summary.actions = stats.by_mode({p.name for p in self.policies.policies
                                         if not p.is_enforced})

    def _standing(self, summary: CycleSummary, now: datetime, cycle_id: int) -> None:
        """Volumes, snapshots and addresses the policies govern (costguard/standing/)."""
        # deletes take from what the act stage's stops left of the fleet-wide caps
        summary.standing = govern(self.db, self.providers, self.policies.policies,
                                  self.standing_runner, self.attributor, now, cycle_id,
                                  paused=summary.paused, budget=self.runner.budget)

    def _spend(self, summary: CycleSummary, now: datetime) -> None:
        """Budgets and anomalies over what has accrued; both alert through the outbox."""
        if not (self.policies.budgets or self.policies.anomalies):
            return
        hour = now.replace(minute=0, second=0, microsecond=0)
        if self._spend_checked == hour:
            return  # both judge whole hours and days: once an hour is enough (alerts dedupe)
        self._spend_checked = hour
        # imported here: a policy set with no budget or anomaly rule (most) never needs them,
        # nor the report queries and rollups they read spend with
        from costguard.costs.hourly_checks import HourlyChecks

        if self._checks is None:
            self._checks = HourlyChecks()
        with self.db.session() as s:
            statuses, anomalies = self._checks.run(s, self.policies, now)
        summary.budgets = len(statuses)
        summary.anomalies = len(anomalies)

    def _alert(self, summary: CycleSummary, now: datetime) -> None:
        summary.alerts_sent = dispatch(self.db, self.settings.alerts, now,
                                       printer=self.alert_printer).sent
