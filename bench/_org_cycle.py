"""costguard's cycles over the org-scale fake, as their own process (bench/org_scale.py):
`python -m bench._org_cycle ENDPOINT SPEC_JSON DB_URL OUT.json`.

The spec names the accounts (all assumed through CostguardRole), regions, `now`, the worker
count, the GCP projects and their fakes' endpoints when the organisation has some
(spec["gcp"]: {"projects", "compute", "monitoring"}; bench/_org_gcp.py), and how many cycles
to run: the first is cold (an empty store: an hour of metrics to
read, every instance type to describe), each next one `interval_s` later is a steady cycle.
Writes per cycle: wall (and its start and end, epoch seconds), CPU of this process (all
threads), peak RSS so far, AWS API calls by
operation (botocore's `_make_api_call`: retries are below it), and the summary.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench._api_calls import CallCpu, install

POLICIES = Path(__file__).resolve().parent / "policies" / "aws-c7n-equivalent.yml"
# both clouds: those three for AWS, gcp-fleet.yml's three for GCP
BOTH_CLOUDS = Path(__file__).resolve().parent / "policies" / "org-both-clouds.yml"


def make_engine(endpoint: str | None, spec: dict[str, Any], db_url: str) -> tuple[Any, Any]:
    """An Engine over the spec's accounts (each assumed through CostguardRole) and regions,
    against `endpoint` (None: wherever boto3 sends it, e.g. moto's mock); and its clock."""
    import boto3

    from bench._org_fleet import account_ids
    from costguard.actions.settings import SafetySettings
    from costguard.alerts.settings import AlertsSettings
    from costguard.clock import ManualClock
    from costguard.config import Settings
    from costguard.engine import Engine
    from costguard.policy.load import load_policy_set
    from costguard.providers.aws import AwsProvider, AwsSettings
    from costguard.providers.aws.settings import AwsAccount, CloudWatchSettings
    from costguard.store.db import Database

    clock = ManualClock(datetime.fromisoformat(spec["now"]))
    aws = AwsSettings(
        accounts=[AwsAccount(id=a) for a in account_ids(spec["accounts"])],
        regions=spec["regions"],
        endpoint_url=endpoint,
        max_workers=spec["workers"],
        cloudwatch=CloudWatchSettings(instance_dimension=True, period_seconds=300,
                                      rollup_by_instance=True,
                                      measurements=["utilization_gpu"]),
    )
    providers: dict[str, Any] = {}
    policies = POLICIES
    if spec.get("gcp"):
        from costguard.providers.gcp import GcpProvider
        from costguard.providers.gcp.settings import GcpSettings

        gcp = spec["gcp"]
        providers["gcp"] = GcpProvider(GcpSettings(
            projects=gcp["projects"], compute_endpoint=gcp["compute"], tpu_endpoint=gcp["compute"],
            monitoring_endpoint=gcp["monitoring"], anonymous=True,
            max_workers=spec["workers"],
            # 0: list whole VMs (to measure the partial listing; bench/gcp_cycle.py)
            partial_responses=os.environ.get("COSTGUARD_BENCH_GCP_PARTIAL", "1") != "0"),
            clock=clock)
        policies = BOTH_CLOUDS
    settings = Settings(database_url=db_url, policy_paths=[policies],
                        alerts=AlertsSettings(console=False),
                        safety=SafetySettings(max_actions_per_cycle=1_000_000,
                                              max_usd_per_hour_per_cycle=None))
    providers["aws"] = AwsProvider(aws, clock=clock,
                                   session=boto3.Session(region_name="us-east-1"))
    engine = Engine(settings, Database(db_url), providers, load_policy_set([policies]), clock)
    return engine, clock


def _time_calls() -> CallCpu:
    """Client CPU inside the clouds' calls: botocore's (AWS), requests' (Compute REST, the
    HTTP batches) and gRPC's unary calls (Monitoring)."""
    import grpc._channel  # type: ignore[import-untyped]
    import grpc._interceptor  # type: ignore[import-untyped]
    import requests
    from botocore.client import BaseClient

    cpu = CallCpu()
    cpu.patch(BaseClient, "_make_api_call", "aws")
    cpu.patch(requests.Session, "request", "gcp http")
    for unary in (grpc._channel._UnaryUnaryMultiCallable,
                  grpc._interceptor._UnaryUnaryMultiCallable):  # api-core intercepts
        cpu.patch(unary, "__call__", "gcp grpc")
    return cpu


def main(endpoint: str, spec_json: str, db_url: str, out: str) -> None:
    counts = install()
    in_calls = _time_calls()
    spec = json.loads(spec_json)
    engine, clock = make_engine(endpoint, spec, db_url)
    cycles = []
    for n in range(spec["cycles"]):
        if n:
            clock.advance(timedelta(seconds=spec["interval_s"]))
        before, calls_cpu0 = Counter(counts), dict(in_calls.seconds)
        cpu0 = time.process_time()
        started, started_at = time.perf_counter(), time.time()
        summary = engine.run_cycle()
        cycles.append({
            "wall_s": time.perf_counter() - started,
            "started_at": started_at, "ended_at": time.time(),
            "cpu_s": time.process_time() - cpu0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "api_calls": dict(Counter(counts) - before),
            "calls_cpu_s": {k: v - calls_cpu0.get(k, 0.0)
                            for k, v in in_calls.seconds.items()},
            "summary": summary.as_dict(),
        })
    engine.db.dispose()
    Path(out).write_text(json.dumps({"cycles": cycles}, indent=1, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:5])
