"""Before an idle finding may lead to a stop: are its signals believable, and is the host
really doing nothing?

`evaluate` judges idleness on the reading window, which keeps only the GPU figures. A finding
of a policy that stops (or scales in) gets two more checks here, on the stored readings of
its window:

1. **Signals checked** (`telemetry/trust.py`): minutes whose figures contradict each other are
   set aside as no data and the window judged again; not idle then means no stop, and says
   why.
2. **Host activity** (`telemetry/corroborate.py`): a GPU-idle host showing work in progress
   is *idle-but-busy*. Its stop is held back unless the action says `when_host_busy: stop`.

Either way the finding's reason carries what was found, so the warning, the journal's stop
entry and `costguard explain` say which corroboration held a stop back or let it go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from costguard.minutes import covering, from_source
from costguard.model import TelemetrySource, Verdict
from costguard.policy.actions import StopAction
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy
from costguard.store.db import Database
from costguard.store.readings import read_shaped
from costguard.store.refs import InstanceRef
from costguard.telemetry.classify import classify
from costguard.telemetry.stop_evidence import Checkable, stop_evidence


class StopReading(NamedTuple):
    """A stored GPU-minute's figures the checks read: the classifier's, power, and the
    host's (read with `read_shaped`, without a pydantic model per minute)."""

    gpu_index: int
    minute: datetime
    span_minutes: int
    source: TelemetrySource
    util_mean: float | None
    util_p95: float | None
    util_max: float | None
    sm_mean: float | None
    sm_p95: float | None
    sm_max: float | None
    mem_used_bytes: int | None
    process_count: int | None
    top_process_pid: int | None
    top_process_bytes: int | None
    power_w_mean: float | None
    power_limit_w: float | None
    host_cpu_pct: float | None
    host_cpus: int | None
    host_hot_cores: int | None
    host_disk_bps: float | None
    host_net_bps: float | None
    host_sessions: int | None
    host_input_idle_s: float | None
    kernels_busy: int | None
    kernel_idle_s: float | None
    gpu_proc_cpu_pct: float | None
    gpu_proc_age_s: float | None


# instances whose stored readings are read and checked at once: an hour of every stop
# candidate's readings held together (~600 bytes a reading as `StopReading`s) was the
# evaluate stage's peak, ~14 MB at 3,000 simulated instances (3.6 a hundred at a time), and
# the memory a cycle's peak fills stays the process's
CHECK_BATCH = 100


def stop_step(policy: Policy) -> StopAction | None:
    """The policy's action that stops an idle instance (stop, or scale_in for a group's)."""
    return policy.stop_action or policy.scale_in_action


def needs_check(f: Finding) -> bool:
    """A finding that holds on an idle verdict, of a policy that would stop on it."""
    return (f.holds and f.policy.condition.idle is not None and stop_step(f.policy) is not None
            and f.classification is not None and f.classification.verdict is Verdict.IDLE)


def held_back(f: Finding) -> bool:
    """A finding the stop's checks turned: idle on the GPUs, but not stopped (idle-but-busy,
    or not idle once untrusted minutes were set aside)."""
    return not f.holds and (f.host is not None or bool(f.untrusted))


def check_stops(db: Database, policies: Sequence[Policy], findings: list[Finding],
                start: datetime, now: datetime, agents: set[InstanceRef]) -> list[Finding]:
    """`findings` with each that needs them through the checks, on the stored readings of
    its instance, read in one pass each, `CHECK_BATCH` instances at a time. Only an agent's
    readings carry power, so only theirs can be untrusted: of the instances without (`agents`
    has those with), only the host's last minutes are read (a cloud's CPU figure)."""
    checked: dict[InstanceRef, list[int]] = {}  # instance -> its findings' places
    for n, f in enumerate(findings):
        if needs_check(f):
            checked.setdefault((f.instance.provider, f.instance.instance_id), []).append(n)
    if not checked:
        return findings
    recent = max(p.condition.idle.host.recent for p in policies if p.condition.idle)
    out = list(findings)
    refs = list(checked)
    for first in range(0, len(refs), CHECK_BATCH):
        batch = set(refs[first:first + CHECK_BATCH])
        with db.session() as s:
            stored = read_shaped(s, batch & agents, start, now, StopReading)
            stored.update(read_shaped(s, batch - agents, max(start, now - recent), now,
                                      StopReading))
        for ref in batch:
            for n in checked[ref]:
                out[n] = judge(out[n], stored.get(ref, []), now)
    return out


def judge(f: Finding, minutes: Sequence[Checkable], now: datetime) -> Finding:
    """`f` after the signal checks and the host's corroboration (unchanged if `f` does not
    need them)."""
    idle, step = f.policy.condition.idle, stop_step(f.policy)
    if not needs_check(f) or idle is None or step is None:
        return f
    start = now - idle.for_
    window = covering(minutes, start, now)
    if idle.evidence == "agent":
        window = from_source(window, TelemetrySource.AGENT)
    ev = stop_evidence(
        window, lambda kept: classify(kept, window_start=start, window_end=now,
                                      gpu_count=max(f.instance.gpu_count, 1),
                                      signal=idle.signal, below=idle.below,
                                      min_coverage=idle.min_coverage),
        now, idle.host, f.classification)
    if ev.host is None:  # no longer idle once the untrusted minutes are set aside
        return replace(f, holds=False, untrusted=ev.untrusted,
                       reason=f"not idle once untrusted signals are set aside "
                              f"({ev.verdict.verdict}): {ev.untrusted}; {ev.verdict.evidence}")
    if ev.idle_but_busy and step.when_host_busy == "hold":
        return replace(f, holds=False, host=ev.host, untrusted=ev.untrusted,
                       reason=f"idle-but-busy: {ev.host.evidence}; the stop is held back "
                              f"(when_host_busy: hold); GPUs: {f.evidence}")
    said = ev.host.evidence + ("; stopping anyway (when_host_busy: stop)"
                               if ev.idle_but_busy else "")
    return replace(f, host=ev.host, untrusted=ev.untrusted,
                   reason="; ".join(filter(None, [f.reason, ev.untrusted, said])))
