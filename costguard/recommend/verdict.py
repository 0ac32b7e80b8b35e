"""A stored efficiency verdict: what the `underused:` condition, the underused-spend metric
and the weekly digest read, instead of judging a week of readings each time.

The daemon's cycle judges each GPU instance once per `recommend.refresh` (a day by default)
and stores the verdict with its fit (`recommend/stored.py`); this module is the value read
back, light enough for the policy evaluator to import.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from costguard.policy.conditions import UnderusedCondition
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import Efficiency

# the settings a verdict depends on; refresh, the judge_* caps and the digest's do not
JUDGED_BY = frozenset({"window", "below", "used_share", "gpu_low", "cpu_high", "iowait_high",
                       "min_coverage", "min_hours", "headroom", "architectures"})


def settings_key(cfg: RecommendSettings) -> str:
    """A short name for the thresholds a verdict was judged with: one stored verdict per
    instance and set of thresholds (a policy may judge with its own)."""
    text = cfg.model_dump_json(include=set(JUDGED_BY))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def judged_with(base: RecommendSettings, cond: UnderusedCondition) -> RecommendSettings:
    """The settings an `underused:` condition's verdicts are judged with: `recommend:`'s,
    with the thresholds the condition sets."""
    return base.model_copy(update=cond.overrides())


@dataclass(frozen=True)
class StoredVerdict:
    efficiency: Efficiency
    judged_at: datetime
    team: str
    spend_usd: float  # the instance's estimated spend in the verdict's window
    fit_to: str | None = None  # the cheaper type, if there is one
    monthly_usd: float = 0.0  # what the fit saves per month (negative: it costs more)
    reason: str = ""  # why there is no fit, or what the move does
    risks: tuple[str, ...] = field(default=())

    @property
    def underused_usd(self) -> float:
        return self.spend_usd if self.efficiency.underused else 0.0

    def summary(self) -> str:
        """The verdict and fit in one line, for a finding's reason and an alert."""
        e = self.efficiency
        head = f"{e.bottleneck}: " + "; ".join(e.evidence[:2])
        if self.fit_to:
            return f"{head}; {self.fit_to} fits, saving ${self.monthly_usd:,.0f}/month"
        return f"{head}; {self.reason}" if self.reason else head
