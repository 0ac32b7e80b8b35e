"""Through the engine: a GCP project costguard cannot read is one gap and one alert, however
many cycles it stays unreadable, and the other projects are governed meanwhile."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlmodel import col, select

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.providers.gcp import GcpProvider
from costguard.store.db import Database
from costguard.store.tables import AlertRow, GapRow, InstanceRow

POLICY = """\
policies:
  - name: untagged
    condition: {missing_tags: [team]}
    actions: [{notify: {to: [owner]}}]
"""


def test_unreadable_projects_are_one_gap_and_one_alert_each_across_cycles(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "visible", labels={"team": "a"})
    fake.compute.add_instance("locked-proj", "us-central1-a", "hidden")
    fake.compute.add_instance("no-api-proj", "us-central1-a", "hidden-too")
    fake.compute.forbid_project("locked-proj")
    fake.compute.forbid_project("no-api-proj", api_disabled=True)
    (tmp_path / "p.yml").write_text(POLICY)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    settings = Settings(database_url=url, policy_paths=[tmp_path / "p.yml"],
                        alerts=AlertsSettings(console=False))
    db = Database(url)
    provider = GcpProvider(
        fake.settings(projects=["ml-prod", "locked-proj", "no-api-proj"]), clock=clock)
    engine = Engine(settings, db, {"gcp": provider}, load_policy_set([tmp_path / "p.yml"]),
                    clock)
    try:
        for _ in range(2):
            summary = engine.run_cycle()
            clock.advance(timedelta(minutes=5))
        assert {g["scope"] for g in summary.gaps} == {"locked-proj", "no-api-proj"}
        with db.session() as s:
            gaps = list(s.exec(select(GapRow).where(col(GapRow.resolved_at).is_(None))))
            alerts = list(s.exec(select(AlertRow).where(AlertRow.kind == "gap")))
            listed = [r.name for r in s.exec(select(InstanceRow))]
        assert sorted(g.scope for g in gaps) == ["locked-proj", "no-api-proj"]
        assert len(alerts) == 2  # one per project, not one per cycle
        assert any("gcloud services enable compute.googleapis.com" in (a.body or "")
                   for a in alerts)
        assert listed == ["visible"]
    finally:
        provider.close()
        db.dispose()
