"""`costguard recommend --format csv`: an instance's name and its team are text anyone who
can tag an instance wrote; one that would start a spreadsheet formula starts with an
apostrophe (docs/report.md, CSV), in the per-instance file and the per-team one."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from costguard.model import Instance, InstanceState
from costguard.recommend.fit import Fit
from costguard.recommend.render import to_csv, to_team_csv
from costguard.recommend.run import Recommendation, Recommendations
from costguard.telemetry.efficiency import Bottleneck, Efficiency

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _rec(iid: str, name: str, team: str) -> Recommendation:
    inst = Instance(provider="aws", account="1", region="us-east-1", instance_id=iid,
                    name=name, instance_type="p4d.24xlarge", state=InstanceState.RUNNING,
                    gpu_count=8, launch_time=NOW, observed_at=NOW)
    eff = Efficiency(bottleneck=Bottleneck.HEALTHY, underused=True, evidence=(),
                     window_start=NOW - timedelta(days=7), window_end=NOW, hours=168.0,
                     coverage=1.0, gpus_paid=8)
    return Recommendation(Fit(inst, eff, None, monthly_usd=-12.5), team, 100.0)


def test_names_and_teams_never_start_a_spreadsheet_formula() -> None:
    recs = Recommendations(NOW - timedelta(days=7), NOW, [
        _rec("i-1", '=HYPERLINK("http://x.example","go")', "@ops"),
        _rec("i-2", "trainer", "research")])
    rows = {r["instance_id"]: r for r in csv.DictReader(io.StringIO(to_csv(recs, True)))}
    assert rows["i-1"]["name"] == '\'=HYPERLINK("http://x.example","go")'
    assert rows["i-1"]["team"] == "'@ops"
    assert (rows["i-2"]["name"], rows["i-2"]["team"]) == ("trainer", "research")
    assert rows["i-1"]["monthly_savings_usd"] == "-12.50"  # a figure stays a number
    teams = [r["team"] for r in csv.DictReader(io.StringIO(to_team_csv(recs)))]
    assert sorted(teams) == ["'@ops", "research"]
