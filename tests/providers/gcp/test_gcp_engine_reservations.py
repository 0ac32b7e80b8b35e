"""Through the engine: a Compute Engine reservation with capacity free for two days is
reported once, with the VM beside it that could run in it, and summed in the report;
nothing is ever called on the reservation (or anything else) but reads."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.report.run import render_report
from costguard.store.tables import AlertRow
from tests.fakes.gcp_engine import gcp_engine_over

P, Z = "ml-prod", "us-central1-a"
POLICY = """\
policies:
  - name: unused-reservations
    resource: reservation
    mode: enforce
    condition: {unused: {for: 2d}}
    actions: [{notify: {to: [team]}}]
"""


def test_a_half_used_reservation_is_reported_with_its_twin(
        fake: FakeGcp, clock: ManualClock, tmp_path: Path) -> None:
    fake.compute.add_reservation(P, Z, "a100-pool", "a2-highgpu-1g", 4, in_use=2,
                                 specific_required=True)
    fake.compute.add_instance(P, Z, "beside", "a2-highgpu-1g",
                              accelerators=[("nvidia-tesla-a100", 1)])
    start = clock.now()
    with gcp_engine_over(fake, tmp_path, POLICY, clock) as engine:
        for _ in range(2 * 24 + 2):
            engine.run_cycle()
            clock.advance(timedelta(hours=1))
        with engine.db.session() as s:
            alerts = list(s.exec(select(AlertRow).where(
                AlertRow.policy == "unused-reservations")))
        assert len(alerts) == 1
        assert "2 of 4 reserved a2-highgpu-1g unused now" in alerts[0].subject
        assert "could run in it: beside" in alerts[0].subject
        doc = json.loads(render_report(engine.settings, ["team"], start, clock.now(), None, "json",
                                       tmp_path / "r.json", now=clock.now()))
        (line,) = doc["reservations"]
        reserved = fake.compute.reservation(P, Z, "a100-pool")
        assert line["reservation"] == str(reserved.id) and line["twins"] == ["beside"]
        assert line["name"] == "a100-pool"
        out = tmp_path / "r.txt"
        render_report(engine.settings, ["team"], start, clock.now(), None, "table", out,
                      now=clock.now())
        assert "  a100-pool (unattributed): a2-highgpu-1g x4, 2 running, targeted" in \
            out.read_text(encoding="utf-8")  # a GCP reservation by its name
        assert line["unused_accelerator_hours"] == line["unused_instance_hours"] == 2 * 50
        mutations = [c for c in fake.compute.calls if c.startswith(("POST", "DELETE",
                                                                    "PATCH"))]
        assert mutations == []
