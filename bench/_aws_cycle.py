"""One costguard cycle against a moto server, as its own process (so its CPU and peak memory
are its own): `python -m bench._aws_cycle ENDPOINT NOW_ISO DB_URL OUT.json REGION...`.

Writes {"cycle_s", "summary", "api_calls"} to OUT.json. Used by bench/aws.py.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

from bench._api_calls import install

POLICIES = Path(__file__).resolve().parent / "policies" / "aws-c7n-equivalent.yml"


def main(endpoint: str, now_iso: str, db_url: str, out: str, regions: list[str]) -> None:
    counts = install()
    import boto3

    from costguard.actions.settings import SafetySettings
    from costguard.alerts.settings import AlertsSettings
    from costguard.clock import ManualClock
    from costguard.config import Settings
    from costguard.engine import Engine
    from costguard.policy.load import load_policy_set
    from costguard.providers.aws import AwsProvider, AwsSettings
    from costguard.providers.aws.settings import CloudWatchSettings
    from costguard.store.db import Database

    clock = ManualClock(datetime.fromisoformat(now_iso))
    aws = AwsSettings(
        regions=regions,
        endpoint_url=endpoint,
        max_workers=4,
        # the fleet's CloudWatch agent, as configured: utilization_gpu only, aggregated by
        # InstanceId (one series per instance), every 5 minutes
        cloudwatch=CloudWatchSettings(instance_dimension=True, period_seconds=300,
                                      rollup_by_instance=True,
                                      measurements=["utilization_gpu"]),
    )
    settings = Settings(database_url=db_url, policy_paths=[POLICIES],
                        alerts=AlertsSettings(console=False),
                        # like the c7n run: no fleet-wide blast-radius cap
                        safety=SafetySettings(max_actions_per_cycle=100000,
                                              max_usd_per_hour_per_cycle=None))
    db = Database(db_url)
    provider = AwsProvider(aws, clock=clock, session=boto3.Session(region_name=regions[0]))
    engine = Engine(settings, db, {"aws": provider}, load_policy_set([POLICIES]), clock)
    started = time.perf_counter()
    summary = engine.run_cycle()
    cycle_s = time.perf_counter() - started
    db.dispose()
    Path(out).write_text(json.dumps(
        {"cycle_s": cycle_s, "summary": summary.as_dict(), "api_calls": dict(counts)},
        indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
