"""Through the engine and the real GCP provider (local fakes): a project whose Cloud
Monitoring reads fail while another's answer has the minutes it missed stored once it reads
again, and the project that answered is not read twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc  # type: ignore[import-untyped]
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp.metrics import UTIL
from costguard.store.readings import read_minutes
from costguard.store.tables import GapRow
from tests.fakes.gcp_engine import gcp_engine

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = """\
policies:
  - name: idle-gpu
    filters: {gpu: true, state: running}
    condition: {idle: {below: 5, for: 1h}}
    actions: [{notify: {to: [owner]}}]
"""


def test_a_project_whose_metrics_failed_is_caught_up_when_it_reads_again(tmp_path: Path
                                                                          ) -> None:
    clock = ManualClock(NOW)
    step = timedelta(minutes=5)
    with FakeGcp() as fake:
        ids = {}
        for project, name in (("ml-prod", "a"), ("ml-research", "b")):
            vm = fake.compute.add_instance(project, "us-central1-a", name, "a2-highgpu-1g",
                                           labels={"team": "nlp"})
            ids[name] = str(vm.id)
            points = [(NOW + timedelta(minutes=m, seconds=30), 80.0) for m in range(-90, 60)]
            fake.monitoring.add_gpu_series(project, UTIL, ids[name], points)
        engine, db, provider = gcp_engine(fake, tmp_path, POLICY, clock,
                                          ["ml-prod", "ml-research"])
        try:
            engine.run_cycle()
            fake.monitoring.fail_next(grpc.StatusCode.PERMISSION_DENIED, times=10**6,
                                      project="ml-research")
            for _ in range(6):  # 30 minutes: ml-research fails, ml-prod answers
                clock.advance(step)
                engine.run_cycle()
            for failure in fake.monitoring._failures:
                failure.remaining = 0
            clock.advance(step)
            back = clock.now()
            asked_before = len(fake.monitoring.requests)
            engine.run_cycle()

            with db.session() as s:
                stored = read_minutes(s, [("gcp", ids["a"]), ("gcp", ids["b"])],
                                      NOW - timedelta(minutes=15), back)
                gaps = list(s.exec(select(GapRow)))
            for name in ("a", "b"):
                minutes = sorted({m.minute for m in stored[("gcp", ids[name])]})
                assert minutes == [NOW + timedelta(minutes=m) for m in range(-15, 35)], name
            assert [(g.scope, g.resolved_at) for g in gaps] == [("ml-research metrics", back)]
            # ml-prod was asked from its watermark (the settle window), ml-research from
            # where its last good read ended (less the settle window)
            spans = {(r.name, r.interval.start_time.timestamp_pb().seconds)
                     for r in fake.monitoring.requests[asked_before:]}
            starts = {name: datetime.fromtimestamp(min(t for p, t in spans if p == name), UTC)
                      for name in ("projects/ml-prod", "projects/ml-research")}
            assert starts == {"projects/ml-prod": back - step - provider.metrics_settle,
                              "projects/ml-research": NOW - provider.metrics_settle}
        finally:
            provider.close()
            db.dispose()
