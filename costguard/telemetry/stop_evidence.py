"""What a stop is decided on, beyond the GPU-only idle verdict: the window judged again with
its untrusted minutes set aside (telemetry/trust.py), and, where still idle, what the host
showed (telemetry/corroborate.py). One place for the daemon's stop (policy/stop_check.py)
and the agent's self-stop (telemetry/selfstop.py), so both decide alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from costguard.model import Classification, Verdict
from costguard.policy.conditions import HostActivity
from costguard.telemetry.corroborate import HostFigures, HostVerdict, host_activity
from costguard.telemetry.trust import Checked, describe, untrusted


class Checkable(Checked, HostFigures, Protocol):
    """A GPU-minute as the stop's checks read it: a `GpuMinute`, or a stored reading's
    copy (policy/stop_check.py `StopReading`)."""


C = TypeVar("C", bound=Checkable)


@dataclass(frozen=True)
class StopEvidence:
    verdict: Classification  # with the untrusted minutes set aside
    untrusted: str  # which minutes were, and why ("" when none)
    host: HostVerdict | None  # what the host showed, where the verdict is still idle

    @property
    def idle_but_busy(self) -> bool:
        return self.host is not None and self.host.busy


def stop_evidence(window: Sequence[C], judge: Callable[[Sequence[C]], Classification],
                  end: datetime, rules: HostActivity,
                  verdict: Classification | None = None) -> StopEvidence:
    """`judge` classifies readings over the window; `verdict`, where given, is its answer
    for the whole `window` (judged again only when minutes are set aside)."""
    found = untrusted(window)
    if found or verdict is None:
        verdict = judge([m for m in window if (m.gpu_index, m.minute) not in found])
    host = host_activity(window, end, rules) if verdict.verdict is Verdict.IDLE else None
    return StopEvidence(verdict, describe(found), host)
