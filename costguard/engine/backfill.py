"""A first cycle's cloud metrics: the recent span for every GPU, the idle window's history
only for the GPUs that could still be idle.

With no watermark (a new deployment, a wiped store), the engine needs the whole idle window
(an hour, say) to decide this cycle, not a window's wait. Most of a fleet is busy, and one
busy minute inside the window already rules `idle` out: so the last quarter hour is read
for every instance, and the rest of the window only for those whose recent minutes do not
prove them busy. Accrual starts when an instance is first seen, so nothing else needs the
older minutes of a busy GPU. On AWS this is fewer GetMetricData queries (each is billed)
and fewer readings to store; the decisions are the same (tests/engine/test_backfill.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from costguard.model import Gap, GpuMinute, Instance, covering
from costguard.policy.conditions import IdleCondition
from costguard.telemetry.classify import peaks

RECENT = timedelta(minutes=15)

# (instances, start, end, keep) -> (readings, gaps): the readings are stored and fed to the
# window as they arrive; they are also returned only when `keep` is true (a fleet's hour of
# readings held at once was most of a cold cycle's memory)
Fetch = Callable[[list[Instance], datetime, datetime, bool],
                 tuple[list[GpuMinute], list[Gap]]]


def recent_span(conditions: Sequence[IdleCondition]) -> timedelta:
    """The span read first: inside every policy's idle window."""
    return min([RECENT, *(c.for_ for c in conditions)])


def rules_out_idle(recent: Sequence[GpuMinute], cond: IdleCondition, span: timedelta) -> bool:
    """True when `recent` (the last `span` of the instance's minutes) shows the instance is
    not idle under `cond` over its window, whatever the older minutes say.

    IDLE needs every reading of the chosen signal below `below`, so one reading at or above
    it decides, provided that signal is the one chosen. `auto` chooses SM activity only when
    it covers `min_coverage` of the window; with no SM reading in the recent span it cannot
    when that span is more than `1 - min_coverage` of the window.
    """
    util, sm = peaks(recent)
    util_busy = any(p >= cond.below for p in util)
    sm_busy = any(p >= cond.below for p in sm)
    sm_cannot_cover = not sm and span / cond.for_ > 1 - cond.min_coverage
    if cond.signal == "util_gpu":
        return util_busy
    if cond.signal == "sm_active":
        return sm_busy or sm_cannot_cover
    return util_busy and (sm_busy or sm_cannot_cover)


def fetch_cold(fetch: Fetch, wanted: list[Instance], start: datetime, now: datetime,
               conditions: Sequence[IdleCondition]) -> tuple[list[GpuMinute], list[Gap]]:
    """[start, now) for the instances that need it, [now - recent span, now) for the rest;
    returns the recent span's readings (the older ones are stored, not returned)."""
    mid = max(start, now - recent_span(conditions))
    readings, gaps = fetch(wanted, mid, now, True)
    if mid <= start:
        return readings, gaps
    span = now - mid
    by_id: dict[str, list[GpuMinute]] = defaultdict(list)
    for m in covering(readings, mid, now):
        by_id[m.instance_id].append(m)
    undecided = [i for i in wanted
                 if not all(rules_out_idle(by_id.get(i.instance_id, []), c, span)
                            for c in conditions)]
    if not undecided:
        return readings, gaps
    _, more_gaps = fetch(undecided, start, mid, False)  # stored as read, not returned
    by_scope = {g.scope: g for g in [*gaps, *more_gaps]}  # one gap per scope, as one fetch
    return readings, list(by_scope.values())
