"""The cycle's hourly budget and anomaly checks (costs/hourly_checks.py), kept and read whole.

`hourly-checks`: 1,000 running instances accrued every 5 minutes for 15 days (the hourly
anomaly rule's 14 days of history and the day it judges), the days before today rolled up
as the prune leaves them (their raw intervals kept, as a store keeps 35 days), the example
policies' budgets and anomaly rules (policies/budgets.yml), and a fifth more instances from
22:00 (an anomaly for the hourly rule, judged at 23:05). At 22:05 and 23:05 the check
runs as the engine runs it (what it read kept from the check an hour before) and read whole
(a fresh one: what every check read before), each in a transaction rolled back so that
neither sees the other's anomalies; the statuses and anomalies must be the same.
"""

from __future__ import annotations

import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlmodel import Session

from bench import benchmark
from bench.cost_gauges import CYCLE, DAY, _Accrual, _fleet
from costguard.costs.hourly_checks import HourlyChecks
from costguard.costs.rollup import rollup
from costguard.policy.load import load_policy_set
from costguard.policy.schema import PolicySet
from costguard.store.db import Database

INSTANCES = 1_000
HISTORY = timedelta(days=15)
POLICIES = Path(__file__).resolve().parent.parent / "policies"


# what a check found: each budget's (name, spent, forecast), each anomaly opened or grown
Found = tuple[tuple[tuple[object, ...], ...], tuple[tuple[object, ...], ...]]


def _check(db: Database, checks: HourlyChecks, policies: PolicySet, now: datetime
           ) -> tuple[float, Found]:
    """CPU seconds of one check, and what it found (rolled back)."""
    t0 = time.process_time()
    with db.session() as s:
        found = _run(s, checks, policies, now)
        s.rollback()
    return time.process_time() - t0, found


def _run(s: Session, checks: HourlyChecks, policies: PolicySet, now: datetime) -> Found:
    statuses, anomalies = checks.run(s, policies, now)
    return (tuple((st.budget, st.actual_micros, st.forecast_micros) for st in statuses),
            tuple((a.rule, a.value, a.bucket, a.actual_micros, a.baseline_micros)
                  for a in anomalies))


@benchmark("hourly-checks", description=(
    "The cycle's hourly budget and anomaly checks over 1,000 instances accrued every 5 "
    "minutes for 15 days (SQLite; the days before today rolled up, their raw intervals "
    "kept; a fifth more instances from 22:00), the example policies' three budgets and two "
    "anomaly rules (one hourly, 14 days of history): as the engine runs them, what they "
    "read kept from the check an hour before, and read whole as every check was before. "
    "CPU seconds of the process."))
def hourly_checks() -> list[dict[str, object]]:
    policies = load_policy_set([POLICIES])
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        fleet = _fleet()[:INSTANCES]
        accrual = _Accrual(db, fleet)
        # from 22:00 a fifth more instances, the hourly rule's anomaly judged at 23:05
        spike = _Accrual(db, [({**f, "instance_id": f"spike-{f['instance_id']}"}, usd, gpus)
                              for f, usd, gpus in fleet[:INSTANCES // 5]])
        at = DAY - HISTORY
        kept = HourlyChecks()
        for hour in (21, 22, 23):  # 21:05 fills what is kept; 22:05 and 23:05 are timed
            now = DAY + timedelta(hours=hour, minutes=5)
            while at < now:
                accrual.cycle(at)
                if at >= DAY + timedelta(hours=22):
                    spike.cycle(at)
                at += CYCLE
            if hour == 21:
                with db.session() as s:
                    rollup(s, DAY)
            kept_s, kept_found = _check(db, kept, policies, now)
            whole_s, whole_found = _check(db, HourlyChecks(), policies, now)
            if kept_found != whole_found:
                raise AssertionError(f"the kept check differs from the whole one at {now}")
            if hour == 21:
                continue
            rows.append({"time": f"{now:%H:%M}", "instances": INSTANCES,
                         "intervals_stored": accrual.rows + spike.rows,
                         "check_cpu_s_kept": round(kept_s, 2),
                         "check_cpu_s_read_whole": round(whole_s, 2),
                         "budgets": len(policies.budgets),
                         "anomaly_rules": len(policies.anomalies),
                         "anomalies_found": len(kept_found[1]),
                         "same_results": "yes"})
        db.dispose()
    return rows
