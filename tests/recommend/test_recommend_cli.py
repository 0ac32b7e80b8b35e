"""`costguard recommend` on a demo database: the simulated fleet's underused hosts named
with their bottleneck, evidence, fit and dollars, in every format, and the same spend as
`costguard report` (#19)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
runner = CliRunner()
DB = ["--database", "costguard-demo.db"]


# beside the shipped dry-run policy: the same condition, enforced, tagging what it finds
ENFORCED = """\
policies:
  - name: underused-tagged
    mode: enforce
    providers: [sim]
    filters: {gpu: true, state: running}
    condition:
      underused: {bottleneck: [latency-bound, healthy, unused-gpus]}
    actions:
      - tag: {set: {"costguard:underused": "{policy}"}}
"""


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A demo of 26 hours (the verdict needs 24 h of readings), once for the module."""
    path = tmp_path_factory.mktemp("recommend")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(path)
        shutil.copytree(REPO / "policies", path / "policies")
        (path / "policies" / "underused-enforced.yml").write_text(ENFORCED, encoding="utf-8")
        mp.delenv("COSTGUARD_CONFIG", raising=False)
        mp.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{path / 'configured.db'}")
        mp.setattr(cli_common, "CLOCK", ManualClock(NOW))
        result = runner.invoke(app, ["demo", "--hours", "26", "--quiet"])
        assert result.exit_code == 0, result.output
        yield path


def cli(*args: str) -> str:
    result = runner.invoke(app, [*DB, "recommend", *args], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def items(*args: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(cli("--format", "json", *args))
    assert doc["schema"] == 1
    return {i["name"]: i for i in doc["items"]}


def test_every_underused_host_of_the_demo_is_named_with_its_fit(demo_dir: Path) -> None:
    got = items()
    p4d = got["research-p4d-one-of-eight"]
    # one A100 of eight 92.5% busy: unused GPUs, not healthy; and no A10G holds its work
    # (it was sent to a g5.xlarge because the A10G held its 1.6 GB): no cheaper Ampere type
    assert p4d["bottleneck"] == "unused-gpus" and p4d["underused"]
    assert p4d["measured"]["gpus_used"] == 1 and p4d["measured"]["gpus_paid"] == 8
    assert p4d["fit"]["to"] is None
    assert "no cheaper Ampere type holds it" in p4d["fit"]["reason"]
    assert ">= 289 TFLOPS (FP16 tensor) in all" in p4d["fit"]["needs"]
    # the shipped us-east-1 prices: g5.12xlarge $5.672/h, g5.xlarge $1.006/h
    small = got["recsys-g5-small-inference"]
    share = small["measured"]["hours"] / small["measured"]["span_hours"]
    assert small["fit"]["monthly_savings_usd"] == pytest.approx(
        (5.672 - 1.006) * 730 * share, abs=0.01)
    loader = got["vision-g5-starved-loader"]
    assert loader["bottleneck"] == "data-loading" and loader["fit"]["to"] == "g5.16xlarge"
    assert any("host CPU p95 97.0% of 48 vCPUs" in e for e in loader["evidence"])
    small = got["recsys-g5-small-inference"]
    assert small["bottleneck"] == "latency-bound" and small["fit"]["to"] == "g5.xlarge"
    assert all(i["underused"] for i in got.values())


def test_the_text_names_bottleneck_evidence_fit_and_risks_in_80_columns(demo_dir: Path) -> None:
    out = cli()
    assert out.startswith("Waste beyond idle, 2026-03-03 to 2026-03-10 (7 days): ")
    table = out.split("\n\n")[0].splitlines()
    assert all(len(line) <= 80 for line in table)
    row = next(line for line in table if line.startswith("research-p4d-one-of-eight"))
    assert row.split()[1:4] == ["unused-gpus", "1/8", "-"]
    assert "  fit: g5.xlarge (1x A10G 24 GB, 4 vCPUs, 16 GiB) at $1.006/h instead of " \
           "$5.672/h, saves $" in out
    assert "  risk: drops 3 GPUs unused in the window" in out
    assert "no fit: no cheaper Ampere type holds it" in out  # the seeded bursty 4-GPU box


def test_spend_is_the_reports_for_the_same_window(demo_dir: Path) -> None:
    got = items()
    report = runner.invoke(app, [*DB, "report", "--by", "instance", "--since", "7d",
                                 "--format", "json"])
    assert report.exit_code == 0, report.output
    rows = {r["instance"]: r["cost_usd"] for r in json.loads(report.output)["rows"]}
    for item in got.values():
        assert item["spend_usd"] == pytest.approx(rows[item["instance_id"]], abs=0.01)


def test_by_team_adds_up_the_instances(demo_dir: Path) -> None:
    doc = json.loads(cli("--format", "json"))
    for team, row in doc["by_team"].items():
        mine = [i for i in doc["items"] if i["team"] == team]
        assert row["instances"] == len(mine)
        assert row["underused_usd"] == pytest.approx(sum(i["underused_usd"] for i in mine),
                                                     abs=0.02)
    table = list(csv.DictReader(io.StringIO(cli("--by", "team", "--format", "csv"))))
    assert {r["team"] for r in table} == set(doc["by_team"])
    text = cli("--by", "team")
    assert "research" in text and "fits save/month" in text


def test_filter_all_and_csv(demo_dir: Path) -> None:
    assert set(items("--filter", "team=vision")) == {"vision-g5-starved-loader"}
    everything = items("--all")
    assert any(i["bottleneck"] == "healthy" and not i["underused"] for i in everything.values())
    assert any(i["bottleneck"] == "insufficient-data" for i in everything.values())
    rows = list(csv.DictReader(io.StringIO(cli("--format", "csv"))))
    assert {r["name"] for r in rows} == set(items())
    assert {r["fit"] for r in rows if r["name"] == "vision-g5-starved-loader"} == {"g5.16xlarge"}


def test_a_short_window_judges_nothing_rather_than_guessing(demo_dir: Path) -> None:
    doc = json.loads(cli("--window", "6h", "--format", "json"))
    assert doc["summary"]["underused"] == 0
    assert doc["summary"]["insufficient_data"] == doc["summary"]["gpu_instances"]


def test_bad_options_are_clear_errors(demo_dir: Path) -> None:
    bad = runner.invoke(app, [*DB, "recommend", "--window", "soon"])
    assert bad.exit_code == 2 and "bad --window 'soon'" in bad.output
    bad = runner.invoke(app, [*DB, "recommend", "--filter", "colour=red"])
    assert bad.exit_code == 2 and "bad --filter dimension 'colour'" in bad.output


def test_the_cycle_stores_verdicts_and_the_policies_act_on_them(demo_dir: Path) -> None:
    from sqlmodel import select

    from costguard.daemon.metrics import DaemonMetrics
    from costguard.recommend import stored
    from costguard.recommend.settings import RecommendSettings
    from costguard.store.db import Database
    from costguard.store.inventory import current_instances
    from costguard.store.tables import ActionJournalRow, AlertRow

    db = Database(f"sqlite:///{demo_dir / 'costguard-demo.db'}")
    with db.session() as s:
        judged_at = max(v.judged_at for v in stored.load(s, RecommendSettings(), NOW).values())
        verdicts = stored.load(s, RecommendSettings(), NOW)
        instances = {i.instance_id: i for i in current_instances(s)}
        alerts = s.exec(select(AlertRow).where(AlertRow.policy == "underused-gpu")).all()
        journal = s.exec(select(ActionJournalRow).where(
            ActionJournalRow.policy == "underused-tagged")).all()
        metrics = DaemonMetrics()
        metrics.refresh_underused(s, judged_at, RecommendSettings())
    db.dispose()
    name = {ref: instances[ref[1]].name for ref in verdicts}
    under = {name[ref]: v for ref, v in verdicts.items() if v.efficiency.underused}
    assert {"research-p4d-one-of-eight", "vision-g5-starved-loader",
            "recsys-g5-small-inference"} <= set(under)
    assert under["vision-g5-starved-loader"].efficiency.bottleneck == "data-loading"
    assert under["research-p4d-one-of-eight"].fit_to is None  # no A10G holds an A100's work
    # the shipped dry-run policy: only where a cheaper fit saves $100/month or more
    told = {instances[a.instance_id].name for a in alerts if a.instance_id}
    assert told == {n for n, v in under.items() if v.monthly_usd >= 100} == {
        "vision-g5-starved-loader", "recsys-g5-small-inference"}
    assert all(a.subject and "underused" in a.body for a in alerts)
    # enforced, narrowed to two bottlenecks: tagged on the (simulated) cloud, journaled
    tagged = {instances[j.instance_id].name for j in journal if j.status == "done"}
    protected = {instances[j.instance_id].name for j in journal
                 if j.status == "skipped" and "costguard:protect" in (j.detail or "")}
    assert protected and not protected & tagged  # protected ones are never touched
    assert tagged | protected == {n for n, v in under.items()
                                  if v.efficiency.bottleneck in ("latency-bound", "healthy",
                                                                 "unused-gpus")}
    assert "vision-g5-starved-loader" not in tagged and "research-p4d-one-of-eight" in tagged
    assert all(instances[j.instance_id].tags.get("costguard:underused") == "underused-tagged"
               for j in journal if j.status == "done")
    # the metric: per team, what the verdicts say
    per_team: dict[str, float] = {}
    for v in under.values():
        per_team[v.team] = per_team.get(v.team, 0.0) + v.spend_usd
    for team, usd in per_team.items():
        assert metrics.registry.get_sample_value(
            "costguard_underused_spend_usd", {"team": team}) == pytest.approx(usd, abs=0.01)


def test_the_backtest_recommends_at_the_cut_and_scores_what_followed(demo_dir: Path) -> None:
    # the demo has 26 hours: judge its first 12 (of readings), score the 13 after
    (demo_dir / "short.yml").write_text("recommend: {window: 12h, min_hours: 10}\n",
                                        encoding="utf-8")
    args = [*DB, "simulate", "--recommendations", "--since", "25h", "--config", "short.yml"]
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["cut"] == "2026-03-09T23:00:00+00:00" and doc["until"] == NOW.isoformat()
    got = {i["name"]: i for i in doc["items"]}
    small = got["recsys-g5-small-inference"]
    assert small["to"] == "g5.xlarge" and small["held"] and small["broke"] == []
    # its spend after the cut at the sim's g5.12xlarge price, saved at g5.xlarge's: 13 hours
    assert small["spend_after_usd"] == pytest.approx(5.672 * small["hours_after"], rel=0.01)
    assert small["saved_usd"] == pytest.approx(
        small["spend_after_usd"] * (1 - 1.006 / 5.672), abs=0.01)
    assert small["hours_after"] == pytest.approx(13, abs=0.2)
    assert "research-p4d-one-of-eight" not in got or got["research-p4d-one-of-eight"]["to"] \
        is None
    assert doc["saved_usd"] == pytest.approx(sum(i["saved_usd"] for i in doc["items"]),
                                             abs=0.01)
    assert doc["monthly_savings_usd"] == pytest.approx(doc["saved_usd"] * 730 / 13, abs=0.05)
    text = runner.invoke(app, args, terminal_width=80).output
    assert "recsys-g5-small-in" in text and "g5.xlarge" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    short = runner.invoke(app, [*DB, "simulate", "--recommendations", "--since", "20h",
                                "--config", "short.yml"])
    assert short.exit_code == 2
    assert "a backtest needs the verdict's window (0.5d) and 12 hours after it" in short.output


def test_explain_shows_the_stored_verdict_and_checks_underused_on_it(demo_dir: Path) -> None:
    result = runner.invoke(app, [*DB, "explain", "recsys-g5-small-inference", "--format",
                                 "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    eff = doc["efficiency"]
    assert eff["bottleneck"] == "latency-bound" and eff["underused"]
    assert eff["fit"] == "g5.xlarge" and eff["monthly_savings_usd"] > 100
    (policy,) = [p for p in doc["policies"] if p["policy"] == "underused-gpu"]
    assert policy["condition_holds"]
    assert policy["reasons"] == ["underused: " + eff["summary"]]
    healthy = json.loads(runner.invoke(app, [*DB, "explain", "vision-g5-starved-loader",
                                             "--format", "json"]).output)
    (tagged,) = [p for p in healthy["policies"] if p["policy"] == "underused-tagged"]
    assert not tagged["condition_holds"]
    assert tagged["reasons"] == ["underused, but data-loading, not latency-bound or healthy or "
                                 "unused-gpus"]


def test_the_daemons_stored_verdicts_are_taken_unless_fresh(demo_dir: Path) -> None:
    """The demo's cycles judged and stored each GPU instance's verdict: `recommend` takes
    them (and says so); `--fresh` judges every instance's readings again."""
    taken = json.loads(cli("--format", "json"))["summary"]
    fresh = json.loads(cli("--fresh", "--format", "json"))["summary"]
    assert 0 < taken["stored_verdicts"] <= taken["gpu_instances"]
    assert taken["oldest_stored_verdict"] is not None
    assert fresh["stored_verdicts"] == 0 and fresh["oldest_stored_verdict"] is None
    assert fresh["gpu_instances"] == taken["gpu_instances"]
    assert "as the daemon judged them" in cli()
    assert "as the daemon judged them" not in cli("--fresh")
