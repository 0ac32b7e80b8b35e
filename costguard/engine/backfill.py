"""A first cycle's cloud metrics: the recent span for every GPU, the idle window's history
only for the GPUs that could still be idle.

With no watermark (a new deployment, a wiped store), the engine needs the whole idle window
(an hour, say) to decide this cycle, not a window's wait. Most of a fleet is busy, and one
busy minute inside the window already rules `idle` out: so the older minutes of a GPU whose
last quarter hour proves it busy are neither built nor stored. Accrual starts when an
instance is first seen, so nothing else needs them. The decisions are the same either way
(tests/engine/test_backfill.py).

A provider that reads the window once (`costguard.providers.base.ReadsWindowOnce`: Cloud
Monitoring reads whole projects, CloudWatch bills each metric every time a call requests it)
is asked for the whole window in one read and leaves out what the recent span decides. Any
other is asked for the last quarter hour of every GPU, then for the rest of the window of
the GPUs that quarter hour did not decide.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from costguard.alerts.gaps import METRICS_SCOPE
from costguard.engine import behind
from costguard.errors import ProviderError
from costguard.minute_rows import INSTANCE, MinuteRows
from costguard.minutes import Reading, covering
from costguard.model import Gap, GpuMinute, Instance
from costguard.policy.conditions import IdleCondition
from costguard.providers.base import Split
from costguard.store.packed import row_reading
from costguard.telemetry.classify import peaks

log = logging.getLogger("costguard.engine")

RECENT = timedelta(minutes=15)

# a call's readings, handed to `observe` once they are stored
Observe = Callable[[Sequence[GpuMinute]], None]


class Fetch(Protocol):
    """(instances, start, end, observe) -> gaps: the readings are stored and fed to the
    window as they arrive, one call's batch at a time, handed to `observe` (when given), and
    kept nowhere else (a fleet's quarter hour of readings held at once was most of a cold
    cycle's memory). With `split`, the provider reads [start, end) once and leaves out the
    older minutes the split's `decided` does not need."""

    def __call__(self, wanted: list[Instance], start: datetime, end: datetime,
                 observe: Observe | None, split: Split | None = None) -> list[Gap]: ...

# an instance's highest `util_gpu` and highest SM activity over a span; None: no reading
Peak = tuple[float | None, float | None]
_NO_PEAK: Peak = (None, None)


def recent_span(conditions: Sequence[IdleCondition]) -> timedelta:
    """The span read first: inside every policy's idle window."""
    return min([RECENT, *(c.for_ for c in conditions)])


def _higher(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def peak_of(minutes: Sequence[Reading], start: Peak = _NO_PEAK) -> Peak:
    """`start` raised by `minutes`' peaks (`telemetry.classify.peaks`)."""
    util, sm = peaks(minutes)
    return (_higher(start[0], max(util, default=None)),
            _higher(start[1], max(sm, default=None)))


def rules_out_idle(recent: Peak, cond: IdleCondition, span: timedelta) -> bool:
    """True when `recent` (the peaks of the last `span` of the instance's minutes,
    `peak_of`) shows the instance is not idle under `cond` over its window, whatever the
    older minutes say.

    IDLE needs every reading of the chosen signal below `below`, so one reading at or above
    it decides, provided that signal is the one chosen. `auto` chooses SM activity only when
    it covers `min_coverage` of the window; with no SM reading in the recent span it cannot
    when that span is more than `1 - min_coverage` of the window.
    """
    util, sm = recent
    util_busy = util is not None and util >= cond.below
    sm_busy = sm is not None and sm >= cond.below
    sm_cannot_cover = sm is None and span / cond.for_ > 1 - cond.min_coverage
    if cond.signal == "util_gpu":
        return util_busy
    if cond.signal == "sm_active":
        return sm_busy or sm_cannot_cover
    return util_busy and (sm_busy or sm_cannot_cover)


def fetch_cold(fetch: Fetch, wanted: list[Instance], start: datetime, now: datetime,
               conditions: Sequence[IdleCondition], *, read_once: bool = False
               ) -> list[Gap]:
    """[start, now) for the instances that need it, [now - recent span, now) for the rest.
    The recent span's readings are folded into each instance's peaks as they arrive.

    `read_once`: asking the provider for the older minutes in a second read would cost
    more than asking once (`costguard.providers.base.ReadsWindowOnce`). It is asked once
    for [start, now), and leaves out the older minutes of the instances their recent ones
    decide: the same readings, half the calls."""
    mid = max(start, now - recent_span(conditions))
    if mid <= start:
        return fetch(wanted, mid, now, None)
    if read_once:
        return fetch(wanted, start, now, None,
                     (mid, lambda recent: decided(recent, mid, now, conditions)))
    recent: dict[str, Peak] = {}

    def observe(batch: Sequence[GpuMinute]) -> None:
        for instance_id, minutes in by_instance(batch).items():
            recent[instance_id] = peak_of(covering(minutes, mid, now),
                                          recent.get(instance_id, _NO_PEAK))

    gaps = fetch(wanted, mid, now, observe)
    span = now - mid
    undecided = [i for i in wanted
                 if not all(rules_out_idle(recent.get(i.instance_id, _NO_PEAK), c, span)
                            for c in conditions)]
    if not undecided:
        return gaps
    more_gaps = fetch(undecided, start, mid, None)
    by_scope = {g.scope: g for g in [*gaps, *more_gaps]}  # one gap per scope, as one fetch
    return list(by_scope.values())


def decided(recent: Sequence[GpuMinute], mid: datetime, now: datetime,
            conditions: Sequence[IdleCondition]) -> set[str]:
    """The instances whose minutes in [mid, now) among `recent` rule idle out under every
    condition: `fetch_cold`'s second call does not ask for their older minutes."""
    span = now - mid
    return {instance_id for instance_id, minutes in by_instance(recent).items()
            if (recent_ones := covering(minutes, mid, now))
            and all(rules_out_idle(peak_of(recent_ones), c, span) for c in conditions)}


def by_instance(readings: Sequence[GpuMinute]) -> dict[str, list[Reading]]:
    """A call's readings by instance id; a cloud's rows (`MinuteRows`) as the window's light
    readings (`store.packed.row_reading`), not a model each: iterated, rows build a model
    per reading, which at 10,000 simulated instances raised a first cycle's peak by ~90 MB."""
    by_id: dict[str, list[Reading]] = defaultdict(list)
    if isinstance(readings, MinuteRows):
        read = row_reading(readings.names)
        for row in readings.rows:
            by_id[row[INSTANCE]].append(read(row))
    else:
        for m in readings:
            by_id[m.instance_id].append(m)
    return by_id


def catch_up(name: str, fetch: Fetch, members: list[Instance], start: datetime,
             now: datetime, lagging: behind.Behind) -> tuple[list[Gap], bool]:
    """[start, now) for `members`, the instances of scopes behind since `start`; and
    whether the call raised. A call that raises (a provider raises when no scope of a call
    reads) keeps those scopes behind and open as gaps; the rest of the cycle goes on."""
    try:
        gaps = fetch(members, start, now, None)
    except ProviderError as exc:
        log.warning("telemetry gap (behind since %s): %s", start.isoformat(), exc)
        scopes = {exc.scope} | {k for i in members for k in behind.scope_keys(i)
                                if k in lagging}
        return [Gap(provider=name, scope=scope + METRICS_SCOPE, error=str(exc))
                for scope in sorted(scopes)], True
    return gaps, False
