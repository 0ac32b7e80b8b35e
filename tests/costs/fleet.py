"""Hand-built fleets and interval rows for cost and report tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlmodel import Session

from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, TelemetrySource
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database
from costguard.store.tables import CostIntervalRow

T0 = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # midnight EST; DST starts two hours later


def instance(iid: str, itype: str, *, team: str | None = None, gpus: int = 0,
             spot: bool = False, state: InstanceState = InstanceState.RUNNING,
             region: str = "us-east-1", account: str = "111111111111",
             at: datetime = T0) -> Instance:
    return Instance(
        provider="sim", account=account, region=region, instance_id=iid, instance_type=itype,
        state=state, lifecycle=Lifecycle.SPOT if spot else Lifecycle.ON_DEMAND,
        gpu_count=gpus, launch_time=at, observed_at=at,
        tags={"team": team} if team else {},
    )


def idle_minutes(provider: str, iid: str, start: datetime, end: datetime,
                 gpus: int) -> list[GpuMinute]:
    out = []
    minute = start.replace(second=0, microsecond=0)
    while minute < end:
        for g in range(gpus):
            out.append(GpuMinute(provider=provider, instance_id=iid, gpu_index=g, minute=minute,
                                 source=TelemetrySource.SIM, util_mean=0.0, sm_mean=0.0,
                                 mem_used_bytes=10**9, mem_total_bytes=24 * 10**9))
        minute += timedelta(minutes=1)
    return out


def add_interval(session: Session, iid: str, start: datetime, hours: float, usd_per_hour: float,
                 *, team: str | None, itype: str = "p4d.24xlarge", region: str = "us-east-1",
                 gpus: int = 8, idle: bool = False, spot: bool = False,
                 provider: str = "sim") -> CostIntervalRow:
    cost = round(usd_per_hour * hours * 1_000_000)
    gsec = round(gpus * hours * 3600)
    row = CostIntervalRow(
        provider=provider, instance_id=iid, account="111111111111", region=region,
        instance_type=itype, lifecycle="spot" if spot else "on-demand", state="running",
        start=start, end=start + timedelta(hours=hours), usd_per_hour=usd_per_hour,
        price_source="test", cost_micros=cost, gpu_count=gpus, gpu_seconds=gsec,
        idle_gpu_seconds=gsec if idle else 0, idle_cost_micros=cost if idle else 0,
        verdict="idle" if idle else "active", team=team)
    session.add(row)
    return row


def parsed_lines(path: Path) -> list[dict[str, Any]]:
    """The lines the importer reads from export `path` (what the day's sums are made of),
    cheapest first."""
    from costguard.billing.focus_files import open_focus
    from costguard.billing.importer import parse_focus
    from costguard.costs.attribution import Attributor

    lines = parse_focus(open_focus(path), Attributor())
    return sorted(lines, key=lambda line: (line["billed_micros"], line["effective_micros"]))


def billing_lines(db: Database) -> list[BillingCostRow]:
    """Every stored day's sums of bill lines, cheapest first."""
    from sqlmodel import col, select

    with db.session() as s:
        return list(s.scalars(select(BillingCostRow).order_by(col(BillingCostRow.billed_micros))))
