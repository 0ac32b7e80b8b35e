"""Backtest: replay stored history through a policy and say what it would have done.

History is what the store kept: instances (their tags as last seen), cost intervals (when
each ran, at what price, attributed to which team) and GPU readings. The replay steps
through time like the daemon's cycles, evaluates the policy with the same `evaluate()` the
engine uses, and runs a simplified state machine per instance: warn, wait out the grace,
stop if still selected. After a simulated stop the instance counts as stopped until its
GPUs show work again in history (the owner would have started it then) or it really
stopped; that span, at its recorded price, is the saving. A stop followed by real work
within `busy_within` (default one hour) is a false positive.

Cycles run fleet-wide: the stops due in one cycle are one batch, and a batch beyond the
policy's caps, or beyond what is left of the fleet-wide `safety` caps that cycle, stops
none (the live runner's rule, `actions.safety.batch_verdict`). Policies replayed together
share the fleet-wide caps in their order, as live. Snoozes of the past (journal entries,
the snooze tag of the last inventory) hold instances off (simulate/snoozes.py).
Simplifications (documented in docs/actions.md): tags are those of the last inventory;
start and terminate steps are not replayed, so they take nothing from the fleet-wide caps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from costguard.actions.safety import CycleBudget, batch_verdict, is_protected
from costguard.actions.schedule import business_deadline
from costguard.actions.settings import SafetySettings
from costguard.model import Instance, InstanceState
from costguard.policy.base import format_duration
from costguard.policy.evaluate import evaluate, matches
from costguard.policy.schema import Policy
from costguard.simulate.snoozes import journal_windows, snoozed_at, windows_for
from costguard.store.inventory import to_instance
from costguard.store.packed_view import WindowReading
from costguard.store.refs import InstanceRef
from costguard.store.tables import CostIntervalRow, InstanceRow
from costguard.store.window import SlidingReadings

MIN_STEP = _MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class WouldAct:
    policy: str
    provider: str
    instance_id: str
    team: str | None
    action: str  # stop | notify
    at: datetime
    usd_per_hour: float
    saved_usd: float = 0.0
    busy_again_at: datetime | None = None
    false_positive: bool = False


@dataclass(frozen=True)
class Refused:
    """A cycle whose due stops exceeded a cap: none of them was stopped."""

    at: datetime
    instance_ids: list[str]
    usd_per_hour: float
    reason: str


@dataclass
class TeamTotals:
    stops: int = 0
    notices: int = 0
    saved_usd: float = 0.0
    false_positives: int = 0


@dataclass
class BacktestReport:
    policy: str
    since: datetime
    until: datetime
    step: timedelta
    warnings: int = 0
    actions: list[WouldAct] = field(default_factory=list)
    refusals: list[Refused] = field(default_factory=list)  # cycles a cap held back
    snoozed: set[tuple[str, datetime]] = field(default_factory=set)  # (instance, snooze start)

    @property
    def stops(self) -> list[WouldAct]:
        return [a for a in self.actions if a.action == "stop"]

    @property
    def false_positives(self) -> list[WouldAct]:
        return [a for a in self.actions if a.false_positive]

    @property
    def saved_usd(self) -> float:
        return round(sum(a.saved_usd for a in self.actions), 2)

    def by_team(self) -> dict[str, TeamTotals]:
        out: dict[str, TeamTotals] = defaultdict(TeamTotals)
        for a in self.actions:
            t = out[a.team or "unattributed"]
            if a.action == "stop":
                t.stops += 1
            else:
                t.notices += 1
            t.saved_usd = round(t.saved_usd + a.saved_usd, 2)
            t.false_positives += a.false_positive
        return dict(sorted(out.items()))

    def as_json(self) -> dict[str, object]:
        return {
            "policy": self.policy, "since": self.since.isoformat(),
            "until": self.until.isoformat(), "step": str(self.step),
            "warnings": self.warnings, "stops": len(self.stops),
            "saved_usd": self.saved_usd, "false_positives": len(self.false_positives),
            "snoozes_honoured": len(self.snoozed),
            "refused_by_caps": [{"at": r.at.isoformat(), "instances": r.instance_ids,
                                 "usd_per_hour": r.usd_per_hour, "reason": r.reason}
                                for r in self.refusals],
            "by_team": {k: vars(v) for k, v in self.by_team().items()},
            "actions": [{**vars(a), "at": a.at.isoformat(),
                         "busy_again_at": a.busy_again_at.isoformat() if a.busy_again_at
                         else None} for a in self.actions],
        }


@dataclass(frozen=True)
class _Interval:
    start: datetime
    end: datetime
    state: str
    usd_per_hour: float
    team: str | None


class _History:
    """One instance's recorded intervals and readings, with the lookups the replay needs.
    Its readings are read through the replay's `SlidingReadings` (none without a GPU)."""

    def __init__(self, intervals: list[_Interval], ref: InstanceRef,
                 readings: SlidingReadings | None) -> None:
        self.intervals = sorted(intervals, key=lambda i: i.start)
        self.ref, self.readings = ref, readings

    def window(self, start: datetime, end: datetime) -> Sequence[WindowReading]:
        """The readings covering [start, end), which the replay holds (`hold`)."""
        return () if self.readings is None else self.readings.minutes(self.ref, start, end)

    def ahead(self, start: datetime, end: datetime) -> Iterator[WindowReading]:
        """The readings covering [start, end), read from the store in minute order."""
        return iter(()) if self.readings is None else self.readings.scan(self.ref, start, end)

    def at(self, t: datetime) -> _Interval | None:
        return next((i for i in self.intervals if i.start <= t < i.end), None)

    def running_cost(self, start: datetime, end: datetime) -> float:
        total = 0.0
        for i in self.intervals:
            lo, hi = max(i.start, start), min(i.end, end)
            if i.state == InstanceState.RUNNING and hi > lo:
                total += i.usd_per_hour * (hi - lo).total_seconds() / 3600
        return total

    def stops_running(self, after: datetime) -> datetime | None:
        """When history shows the instance leave `running` after `after`."""
        for i in self.intervals:
            if i.end > after and i.state != InstanceState.RUNNING and i.start >= after:
                return i.start
        return None


def backtest(session: Session, policy: Policy, since: datetime, until: datetime, *,
             step: timedelta = timedelta(minutes=10),
             busy_within: timedelta = timedelta(hours=1),
             safety: SafetySettings | None = None) -> BacktestReport:
    """What `policy` would have done over [since, until) of stored history.

    Cycles run every `step` across the whole fleet, as the daemon's do: the instances due
    for a stop in one cycle form one batch, and a batch beyond the policy's caps
    (`limits.max_actions_per_cycle`, `limits.max_usd_per_hour`) or the fleet-wide ones
    (`safety`, default SafetySettings() as the live runner) stops none of them (they stay
    due and are tried again next cycle). Past snoozes hold an instance off.
    """
    return backtest_policies(session, [policy], since, until, step=step,
                             busy_within=busy_within, safety=safety)[0]


def backtest_policies(session: Session, policies: Sequence[Policy], since: datetime,
                      until: datetime, *, step: timedelta = timedelta(minutes=10),
                      busy_within: timedelta = timedelta(hours=1),
                      safety: SafetySettings | None = None) -> list[BacktestReport]:
    """`backtest` of several policies replayed together, one report each.

    In each cycle the policies act in the order given (the live runner's: the policy
    files' order) and share one fleet-wide budget: what the first stops is no longer
    there for the next.
    """
    if step < MIN_STEP:  # 0s never ends; under a minute only repeats the minute's readings
        raise ValueError(f"a replay step of at least {format_duration(MIN_STEP)}, please "
                         f"(got {format_duration(step)}): readings are a minute each")
    safety = safety or SafetySettings()
    lookback = max((_lookback(p) for p in policies), default=timedelta(0))
    journal = journal_windows(session, since - lookback, until)
    found, readings = _histories(session, since - lookback, until + busy_within)
    histories = [(inst, h) for inst, h in found if not is_protected(inst)]
    replays = [_Replay(p, BacktestReport(p.name, since, until, step), [
        _Track(inst, h, windows_for(inst, journal.get((inst.provider, inst.instance_id), []),
                                    p.limits.max_snooze),
               fresh_from=since - timedelta(days=365), next_at=since)
        for inst, h in histories]) for p in policies]
    t = since
    first = min((h.intervals[0].start for _, h in histories if h.intervals), default=until)
    if first > since:  # no cycle before the first recorded interval can act: skip them,
        t = since + (first - since) // step * step  # on the same grid (--since 36500d)
    while t < until:
        readings.hold(t - lookback, t)  # what each policy's condition looks back on
        budget = CycleBudget(safety.max_actions_per_cycle, safety.max_usd_per_hour_per_cycle)
        for rp in replays:
            due = [tr for tr in rp.tracks
                   if tr.next_at <= t and _advance(rp.policy, tr, rp.report, t)]
            if due:
                _stop_batch(rp, due, budget, t, step, busy_within)
        t += step
    for rp in replays:
        rp.report.actions.sort(key=lambda a: (a.at, a.instance_id))
    return [rp.report for rp in replays]


def _lookback(policy: Policy) -> timedelta:
    return policy.condition.idle.for_ if policy.condition.idle else timedelta(0)


def _histories(session: Session, start: datetime, end: datetime
               ) -> tuple[list[tuple[Instance, _History]], SlidingReadings]:
    out = []
    instances = {(r.provider, r.instance_id): to_instance(r) for r in session.exec(
        select(InstanceRow))}
    spans: dict[tuple[str, str], list[_Interval]] = defaultdict(list)
    for c in session.exec(select(CostIntervalRow).where(
            col(CostIntervalRow.end) > start, col(CostIntervalRow.start) < end)):
        spans[(c.provider, c.instance_id)].append(
            _Interval(c.start, c.end, c.state, c.usd_per_hour, c.team))
    refs = [ref for ref in sorted(spans) if ref in instances and instances[ref].has_gpu]
    readings = SlidingReadings(session, refs)
    for ref, intervals in sorted(spans.items()):
        inst = instances.get(ref)
        if inst is None:
            continue
        out.append((inst, _History(intervals, ref, readings if inst.has_gpu else None)))
    return out, readings


@dataclass
class _Track:
    """One instance's replay state: warned (deadline), noticed, stopped until `next_at`."""

    inst: Instance
    h: _History
    snoozes: list[tuple[datetime, datetime]]
    fresh_from: datetime  # readings before a simulated stop don't count
    next_at: datetime  # a simulated stop holds the instance until then
    deadline: datetime | None = None
    noticed: bool = False
    span: _Interval | None = None
    usd_per_hour: float = 0.0


@dataclass
class _Replay:
    """One policy's replay: its report and a track per instance."""

    policy: Policy
    report: BacktestReport
    tracks: list[_Track]


def _advance(policy: Policy, tr: _Track, report: BacktestReport, t: datetime) -> bool:
    """One cycle for one instance; True when its stop is due now."""
    span = tr.h.at(t)
    tr.span = span
    if span is None:
        tr.deadline, tr.noticed = None, False
        return False
    now_inst = tr.inst.model_copy(update={"state": InstanceState(span.state), "observed_at": t})
    if not matches(policy, now_inst, t):
        tr.deadline, tr.noticed = None, False
        return False
    lookback = _lookback(policy)
    f = evaluate(policy, now_inst, tr.h.window(max(t - lookback, tr.fresh_from), t), t,
                 span.usd_per_hour)
    if f is None or not f.holds:
        tr.deadline, tr.noticed = None, False
        return False
    window = snoozed_at(tr.snoozes, t)
    if window is not None:  # as the live runner: no warning, no stop; afresh after it
        report.snoozed.add((tr.inst.instance_id, window[0]))
        tr.deadline, tr.noticed = None, False
        return False
    stop = policy.stop_action
    if stop is None:
        if not tr.noticed:
            report.actions.append(WouldAct(policy.name, tr.inst.provider, tr.inst.instance_id,
                                           span.team, "notify", t, span.usd_per_hour))
            tr.noticed = True
        return False
    if tr.deadline is None:
        report.warnings += 1
        tr.deadline = (business_deadline(stop.calendar, t, stop.grace) if stop.calendar
                       else t + stop.grace)
    tr.usd_per_hour = f.usd_per_hour
    return t >= tr.deadline


def _stop_batch(rp: _Replay, due: list[_Track], budget: CycleBudget, t: datetime,
                step: timedelta, busy_within: timedelta) -> None:
    policy, report = rp.policy, rp.report
    usd = [tr.usd_per_hour for tr in due]
    verdict = batch_verdict(usd, policy.limits, budget)
    if not verdict.allowed:  # all or nothing, as the live runner: they stay due
        report.refusals.append(Refused(t, sorted(tr.inst.instance_id for tr in due),
                                       round(sum(usd), 4), verdict.reason))
        return
    for tr in due:
        assert tr.span is not None
        resume = _stop(policy, tr.inst, tr.h, report, tr.span, t, report.until, busy_within)
        tr.deadline, tr.noticed = None, False
        # restarted at `resume`: its idle window starts afresh, as in the daemon
        tr.fresh_from, tr.next_at = resume, max(resume, t + step)


def _stop(policy: Policy, inst: Instance, h: _History, report: BacktestReport,
          span: _Interval, t: datetime, until: datetime, busy_within: timedelta) -> datetime:
    """Record a simulated stop at `t`; returns when the replay picks the instance up again."""
    busy = _busy_again(policy, inst, h, t, until + busy_within)
    really_stopped = h.stops_running(t)
    candidates = [x for x in (busy, really_stopped, until) if x is not None]
    resume = min(candidates)
    report.actions.append(WouldAct(
        policy.name, inst.provider, inst.instance_id, span.team, "stop", t, span.usd_per_hour,
        saved_usd=round(h.running_cost(t, min(resume, until)), 4), busy_again_at=busy,
        false_positive=busy is not None and busy - t <= busy_within))
    return resume


def _busy_again(policy: Policy, inst: Instance, h: _History, after: datetime,
                end: datetime) -> datetime | None:
    """The first minute after `after` in which a GPU did work by the policy's measure."""
    idle = policy.condition.idle
    if idle is None:
        return None
    # the first whole minute at or after `after` (a cycle's time need not be one)
    first = after.replace(second=0, microsecond=0)
    if first < after:
        first += _MINUTE
    for m in h.ahead(first, end):
        peak = _peak(m, idle.signal)
        if peak is not None and peak >= idle.below:
            return max(m.minute, first)  # a reading of several minutes may begin before
    return None


def _peak(m: WindowReading, signal: str) -> float | None:
    sm = next((v for v in (m.sm_max, m.sm_p95, m.sm_mean) if v is not None), None)
    util = next((v for v in (m.util_max, m.util_p95, m.util_mean) if v is not None), None)
    if signal == "sm_active":
        return sm
    if signal == "util_gpu":
        return util
    return sm if sm is not None else util


def policies_named(policies: Sequence[Policy], name: str | None) -> list[Policy]:
    """The policies to backtest: all of them, or the one called `name`."""
    if name is None:
        return list(policies)
    chosen = [p for p in policies if p.name == name]
    if not chosen:
        raise KeyError(f"no policy named {name!r} (loaded: "
                       f"{', '.join(p.name for p in policies) or 'none'})")
    return chosen
