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


def test_a_name_with_a_bare_carriage_return_stays_in_its_cell() -> None:
    # the csv module quotes only its own line ending (\n): a lone CR went out bare, and a
    # spreadsheet started a new row at "=1#9"
    recs = Recommendations(NOW - timedelta(days=7), NOW, [
        _rec("i-1", "\r=1#9", "ml"), _rec("i-2", "a\rb", "=cmd|' /C calc'!A0")])
    text = to_csv(recs, True)
    for line in text.split("\n")[1:]:
        if line:
            assert line.startswith('"'), repr(line)  # the row is quoted whole
    assert "\r=1" not in text.replace('"\'\r=1', "")  # no bare CR before the formula
    rows = {r["instance_id"]: r for r in csv.DictReader(io.StringIO(text, newline=""))}
    assert rows["i-1"]["name"] == "'\r=1#9"
    assert rows["i-2"]["name"] == "a\rb"
    assert rows["i-2"]["team"] == "'=cmd|' /C calc'!A0"
    assert rows["i-1"]["monthly_savings_usd"] == "-12.50"
    # each row read back by a spreadsheet-like splitter on CR or LF outside quotes: 3 rows
    assert len(list(csv.reader(io.StringIO(text, newline="")))) == 3


def test_every_cell_is_neutralised_not_only_the_named_ones() -> None:
    from costguard.report.cells import csv_text

    text = csv_text([("a", "b", "c"), ("=1+1", "-3.25", "-1+2"), ("@x", "+7", "\tz")])
    assert list(csv.reader(io.StringIO(text, newline="")))[1:] == [
        ["'=1+1", "-3.25", "'-1+2"], ["'@x", "+7", "'\tz"]]
