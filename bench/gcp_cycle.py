"""One costguard cycle against the local GCP fakes, as its own process (so its CPU and peak
memory are its own): `python -m bench.gcp_cycle COMPUTE_URL MONITORING NOW_ISO DB_URL OUT.json
PROJECT...`. Writes {"cycle_s", "summary"} to OUT.json. Used by bench/gcp.py.
`COSTGUARD_BENCH_GCP_HTTP_BATCH=0` turns the Compute HTTP batches off (one call per VM);
`COSTGUARD_BENCH_GCP_PARTIAL=0` lists whole VMs (no partial responses).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

POLICIES = Path(__file__).resolve().parent / "policies" / "gcp-fleet.yml"


def main(compute: str, monitoring: str, now_iso: str, db_url: str, out: str,
         projects: list[str]) -> None:
    from costguard.actions.settings import SafetySettings
    from costguard.alerts.settings import AlertsSettings
    from costguard.clock import ManualClock
    from costguard.config import Settings
    from costguard.engine import Engine
    from costguard.policy.load import load_policy_set
    from costguard.providers.gcp import GcpProvider
    from costguard.providers.gcp.settings import GcpSettings
    from costguard.store.db import Database

    clock = ManualClock(datetime.fromisoformat(now_iso))
    gcp = GcpSettings(projects=projects, compute_endpoint=compute, tpu_endpoint=compute,
                      monitoring_endpoint=monitoring, anonymous=True,
                      http_batch=os.environ.get("COSTGUARD_BENCH_GCP_HTTP_BATCH", "1") != "0",
                      partial_responses=os.environ.get("COSTGUARD_BENCH_GCP_PARTIAL", "1") != "0")
    settings = Settings(database_url=db_url, policy_paths=[POLICIES],
                        alerts=AlertsSettings(console=False),
                        safety=SafetySettings(max_actions_per_cycle=100_000,
                                              max_usd_per_hour_per_cycle=None))
    db = Database(db_url)
    provider = GcpProvider(gcp, clock=clock)
    engine = Engine(settings, db, {"gcp": provider}, load_policy_set([POLICIES]), clock)
    started = time.perf_counter()
    summary = engine.run_cycle()
    cycle_s = time.perf_counter() - started
    provider.close()
    db.dispose()
    Path(out).write_text(json.dumps({"cycle_s": cycle_s, "summary": summary.as_dict()},
                                    indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
