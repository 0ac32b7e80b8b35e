"""What a spend report holds: its rows, keyed by the grouping, and the total. Shared by the
queries that fill it (queries.py, owners.py) and every surface that shows it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


def share_percent(part: int, whole: int) -> int:
    """`part` of `whole` in whole percent, rounded half up once, from the exact figures: the
    one rounding of a share every surface shows (the CLI, the HTML report, the console and
    the API's `idle_percent`). Rounding the API's 4-place share again had the console say
    18% where the CLI said 19% ($84.57 of $457.08 is 18.502%)."""
    if whole <= 0:
        return 0
    return (200 * part + whole) // (2 * whole)


@dataclass(frozen=True)
class ReportRow:
    key: tuple[str, ...]
    cost_micros: int
    idle_cost_micros: int
    spot_cost_micros: int
    gpu_seconds: int
    idle_gpu_seconds: int
    instances: int
    savings_micros: int = 0  # on-demand GPU cost minus the same hours at spot
    billed_micros: int | None = None  # with --compare billed, where bills name the key

    @property
    def idle_percent(self) -> int:
        return share_percent(self.idle_cost_micros, self.cost_micros)

    @property
    def spot_percent(self) -> int:
        return share_percent(self.spot_cost_micros, self.cost_micros)

    @property
    def idle_share(self) -> float:
        return self.idle_cost_micros / self.cost_micros if self.cost_micros else 0.0

    @property
    def spot_share(self) -> float:
        return self.spot_cost_micros / self.cost_micros if self.cost_micros else 0.0


@dataclass(frozen=True)
class WasteLine:
    """One underused instance as the report lists it (`costguard recommend` has the rest)."""

    instance: str
    team: str
    bottleneck: str
    gpus_used: str  # "1/8"
    fit: str | None
    monthly_usd: float


@dataclass(frozen=True)
class Waste:
    """Waste beyond idle over the recommendation window ending at the report's end."""

    since: datetime
    until: datetime
    judged: int
    underused: int
    underused_usd: float
    monthly_savings_usd: float
    by_team: dict[str, dict[str, float]]
    top: tuple[WasteLine, ...]
    stored: int = 0  # of `judged`, verdicts the daemon stored (recommend/run.py)
    oldest_stored: datetime | None = None  # when the oldest of those was judged


@dataclass(frozen=True)
class Report:
    by: tuple[str, ...]
    since: datetime
    until: datetime
    rows: list[ReportRow]
    total: ReportRow
    filters: dict[str, str] = field(default_factory=dict)
    compare: str | None = None
    # spend charged at a fallback price or one older than 30 days when used, in words
    price_warnings: tuple[str, ...] = ()
    # with --compare billed: billed spend no estimate covers, (provider, what, micros), largest
    # first, and the BilledCost of every bill line in the period
    billed_not_compared: tuple[tuple[str, str, int], ...] = ()
    bill_total_micros: int | None = None
    waste: Waste | None = None  # underused GPUs (costguard.recommend), where judged
