"""A first cycle over the real GCP provider (local fakes): Cloud Monitoring reads a project's
series whatever VMs are asked, so the idle window is asked once per project and metric type,
not a quarter hour and then the rest; the busy GPUs' older minutes are still not stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp.metrics import QUERIES, UTIL
from costguard.store.readings import read_minutes
from costguard.store.tables import PolicyStateRow
from tests.fakes.gcp_engine import gcp_engine

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = """\
policies:
  - name: idle-gpu
    filters: {{gpu: true, state: running}}
    condition: {{idle: {{below: 5, for: {window}}}}}
    actions: [{{notify: {{to: [owner]}}}}, {{stop: {{grace: 15m}}}}]
"""


# (the idle window, from when the busy GPU's minutes are kept): its last quarter hour (the
# recent span) decides; with a 5-minute window the last 5 decide, and the provider's 10
# minutes of settling (read again next cycle) are kept
@pytest.mark.parametrize(("window", "busy_from"), [("1h", timedelta(minutes=15)),
                                                   ("5m", timedelta(minutes=10))])
def test_the_first_cycle_asks_each_project_once_and_stores_what_two_reads_would(
        tmp_path: Path, window: str, busy_from: timedelta) -> None:
    clock = ManualClock(NOW)
    with FakeGcp() as fake:
        ids = {}
        for project, name, util in (("ml-prod", "busy", 80.0), ("ml-prod", "idle", 0.0),
                                    ("ml-research", "quiet", 1.0)):
            vm = fake.compute.add_instance(project, "us-central1-a", name, "a2-highgpu-1g",
                                           labels={"team": "nlp"})
            ids[name] = str(vm.id)
            points = [(NOW + timedelta(minutes=m, seconds=30), util) for m in range(-90, 0)]
            fake.monitoring.add_gpu_series(project, UTIL, ids[name], points)
        engine, db, provider = gcp_engine(fake, tmp_path, POLICY.format(window=window), clock,
                                          ["ml-prod", "ml-research"])
        try:
            engine.run_cycle()
            spans = sorted({(r.name, r.interval.start_time.timestamp_pb().seconds,
                             r.interval.end_time.timestamp_pb().seconds)
                            for r in fake.monitoring.requests})
            with db.session() as s:
                stored = read_minutes(s, [("gcp", i) for i in ids.values()],
                                      NOW - timedelta(hours=2), NOW)
                warned = sorted(st.instance_id for st in s.exec(select(PolicyStateRow))
                                if st.state == "warned")
        finally:
            provider.close()
            db.dispose()
    hour = (int((NOW - timedelta(hours=1)).timestamp()), int(NOW.timestamp()))
    assert spans == [("projects/ml-prod", *hour), ("projects/ml-research", *hour)]
    assert sum(fake.monitoring.calls.values()) == 2 * len(QUERIES)  # once per metric type
    first = {name: min(m.minute for m in stored[("gcp", i)]) for name, i in ids.items()}
    # the busy GPU's last quarter hour decides it: its older minutes are not kept
    assert first == {"busy": NOW - busy_from, "idle": NOW - timedelta(hours=1),
                     "quiet": NOW - timedelta(hours=1)}
    assert warned == sorted([ids["idle"], ids["quiet"]])
