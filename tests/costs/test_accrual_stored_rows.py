"""The cost_intervals rows accrual writes, as SQLite stores them: the text of every datetime
(SQLite's DATETIME bind processor writes its own format, and accrual hands the driver
values it bound itself), the storage class and value of every column.

Fleet: A p4d.24xlarge (discounted, 8 GPUs, stopped at the third poll: then its disks only),
B g5.xlarge spot (idle the whole time), C m5.large (name-derived team), D an instance type
without a price, E an m5.large that goes away between polls. Polls at T0, T1 (microseconds),
T2 (given in New York time), T3.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import Discount, DiskPrice, PriceCatalog, PriceOverrides
from costguard.model import InstanceState
from costguard.policy.spend import Attribution
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import T0, idle_minutes, instance

NY = ZoneInfo("America/New_York")
T1 = T0 + timedelta(minutes=7, seconds=30, microseconds=123456)
GONE = T0 + timedelta(minutes=40, microseconds=5)
T2 = datetime(2026, 3, 8, 3, 0, tzinfo=NY)  # 07:00 UTC
T3 = T2 + timedelta(hours=1, seconds=1)
RULES = Attribution.model_validate({
    "dimensions": {"team": {"keys": ["team"], "case": "lower"}, "project": {"keys": ["project"]},
                   "env": {"keys": ["env"]}, "cost-center": {"keys": ["cc"]}},
    "derive": [{"dimension": "team", "from": "name_prefix", "map": {"web-": "frontend"}}],
})


def run_fleet(db: Database) -> None:
    cat = PriceCatalog(overrides=PriceOverrides(
        discounts=(Discount(provider="sim", family="p4d", percent=20),),
        disks=(DiskPrice(provider="sim", instance_type="p4d.24xlarge", usd_per_hour=0.05),),
    ))
    a = instance("i-a", "p4d.24xlarge", team="Research", gpus=8)
    fleet = [a.model_copy(update={"tags": {"team": "Research", "project": "llm", "env": "prod",
                                           "cc": "4711"}}),
             instance("i-b", "g5.xlarge", team="vision", gpus=1, spot=True),
             instance("i-c", "m5.large").model_copy(update={"name": "web-1"}),
             instance("i-d", "zz.mega"),
             instance("i-e", "m5.large", team="ops")]
    b_idle = idle_minutes("sim", "i-b", T0, T3, 1)

    def minutes_of(ref: tuple[str, str], start: datetime, end: datetime) -> list[Any]:
        return [m for m in b_idle if start <= m.minute < end] if ref[1] == "i-b" else []

    def cycle(now: datetime) -> None:
        with db.session() as s:
            accrue(s, now, cat.price_of(), Attributor(RULES), minutes_of=minutes_of,
                   disk_price_of=cat.disk)

    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    cycle(T1)
    with db.session() as s:
        record_inventory(s, "sim", fleet[:4], GONE, complete=True)  # i-e went
    with db.session() as s:
        stopped = [fleet[0].model_copy(update={"state": InstanceState.STOPPED}), *fleet[1:4]]
        record_inventory(s, "sim", stopped, T2, complete=True)
    cycle(T2)
    cycle(T3)


def stored_rows(path: str | Path) -> list[tuple[Any, ...]]:
    """Every cost_intervals row but its id, in `COLUMNS` order, read past SQLAlchemy (the
    sqlite3 module gives str, float, int or None: SQLite's storage class)."""
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(cost_intervals)")]
        assert columns == ["id", *COLUMNS]
        quoted = ", ".join(f'"{c}"' for c in COLUMNS)
        return list(conn.execute(f"SELECT {quoted} FROM cost_intervals "
                                 "ORDER BY instance_id, start"))
    finally:
        conn.close()


COLUMNS = ("provider", "instance_id", "account", "region", "instance_type", "lifecycle",
           "state", "start", "end", "usd_per_hour", "price_source", "cost_micros", "gpu_count",
           "gpu_seconds", "idle_gpu_seconds", "idle_cost_micros", "verdict", "team", "project",
           "env", "cost_center")
ACCOUNT = ("111111111111", "us-east-1")
LIST = "aws on-demand table 2025-11, simulated cloud"
P4D = ("sim", "i-a", *ACCOUNT, "p4d.24xlarge", "on-demand")
A_DIMS = ("research", "llm", "prod", "4711")
G5 = ("sim", "i-b", *ACCOUNT, "g5.xlarge", "spot")
M5C = ("sim", "i-c", *ACCOUNT, "m5.large", "on-demand")
ZZ = ("sim", "i-d", *ACCOUNT, "zz.mega", "on-demand")
M5E = ("sim", "i-e", *ACCOUNT, "m5.large", "on-demand")
AT_T0, AT_T1 = "2026-03-08 05:00:00.000000", "2026-03-08 05:07:30.123456"
AT_T2, AT_T3 = "2026-03-08 07:00:00.000000", "2026-03-08 08:00:01.000000"
EXPECTED: list[tuple[Any, ...]] = [
    (*P4D, "running", AT_T0, AT_T1, 17.566114, f"{LIST}; negotiated discount 20% off", 2196367,
     8, 3601, 0, 0, "no-data", *A_DIMS),
    (*P4D, "running", AT_T1, AT_T2, 17.566114, f"{LIST}; negotiated discount 20% off", 32935861,
     8, 53999, 0, 0, "no-data", *A_DIMS),
    (*P4D, "stopped", AT_T2, AT_T3, 0.05, "attached disks", 50014, 8, 0, 0, 0, "no-data",
     *A_DIMS),
    (*G5, "running", AT_T0, AT_T1, 0.3521, f"{LIST}, spot at 35%", 44025, 1, 450, 450, 44025,
     "idle", "vision", None, None, None),
    (*G5, "running", AT_T1, AT_T2, 0.3521, f"{LIST}, spot at 35%", 660175, 1, 6750, 6750,
     660175, "idle", "vision", None, None, None),
    (*G5, "running", AT_T2, AT_T3, 0.3521, f"{LIST}, spot at 35%", 352198, 1, 3601, 3601,
     352198, "idle", "vision", None, None, None),
    (*M5C, "running", AT_T0, AT_T1, 0.096, LIST, 12003, 0, 0, 0, 0, "no-data", "frontend",
     None, None, None),
    (*M5C, "running", AT_T1, AT_T2, 0.096, LIST, 179997, 0, 0, 0, 0, "no-data", "frontend",
     None, None, None),
    (*M5C, "running", AT_T2, AT_T3, 0.096, LIST, 96027, 0, 0, 0, 0, "no-data", "frontend",
     None, None, None),
    (*ZZ, "running", AT_T0, AT_T1, 0.0, "no price known", 0, 0, 0, 0, 0, "no-data", None, None,
     None, None),
    (*ZZ, "running", AT_T1, AT_T2, 0.0, "no price known", 0, 0, 0, 0, 0, "no-data", None, None,
     None, None),
    (*ZZ, "running", AT_T2, AT_T3, 0.0, "no price known", 0, 0, 0, 0, 0, "no-data", None, None,
     None, None),
    (*M5E, "running", AT_T0, AT_T1, 0.096, LIST, 12003, 0, 0, 0, 0, "no-data", "ops", None,
     None, None),
    (*M5E, "running", AT_T1, "2026-03-08 05:40:00.000005", 0.096, LIST, 51997, 0, 0, 0, 0,
     "no-data", "ops", None, None, None),
]


def test_stored_intervals_are_pinned_to_the_text_and_values_sqlite_holds(tmp_path: Path) -> None:
    path = tmp_path / "costguard.db"
    db = Database(f"sqlite:///{path}")
    try:
        run_fleet(db)
    finally:
        db.dispose()
    got = stored_rows(path)
    assert got == EXPECTED
    # == takes 0 for 0.0: the storage classes too (TEXT times, REAL rates, INTEGER money)
    assert [[type(v) for v in row] for row in got] == [[type(v) for v in row] for row in EXPECTED]
