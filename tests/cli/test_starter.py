"""The first minutes outside a checkout: `costguard --version`, `costguard init` writes a
commented config and the example policies (shipped in the package), and the demo finds the
packaged policies when none are configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard import __version__
from costguard.cli import app
from costguard.config import Settings, load_settings
from costguard.demo.run import demo_policy_paths
from costguard.policy.load import load_policy_set
from costguard.starter import packaged_policies

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"costguard {__version__}"


def test_the_examples_ship_in_the_package_and_are_the_checkouts_policies() -> None:
    shipped = {p.name: p.read_bytes() for p in packaged_policies().glob("*.yml")}
    assert shipped and shipped == {p.name: p.read_bytes()
                                   for p in (REPO / "policies").glob("*.yml")}
    assert packaged_policies().is_relative_to(REPO / "costguard")  # inside the package


def test_init_writes_a_config_and_policies_that_load(tmp_path: Path) -> None:
    result = runner.invoke(app, ["init", str(tmp_path / "cg")])
    assert result.exit_code == 0, result.output
    settings = load_settings(tmp_path / "cg" / "costguard.yaml")
    # relative to the config file, wherever costguard runs from (here: not from cg/)
    assert settings.policy_paths == [tmp_path / "cg" / "policies"]
    policies = load_policy_set(settings.policy_paths)
    assert {p.name for p in policies.policies} >= {"idle-gpu-shutdown"}
    again = runner.invoke(app, ["init", str(tmp_path / "cg")])
    assert again.exit_code == 2 and "exists: nothing was written" in again.output
    forced = runner.invoke(app, ["init", str(tmp_path / "cg"), "--force"])
    assert forced.exit_code == 0


def test_the_demo_uses_the_packaged_policies_outside_a_checkout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no policies/ here
    assert demo_policy_paths(Settings()) == [packaged_policies()]
    (tmp_path / "policies").mkdir()
    assert demo_policy_paths(Settings()) == [Path("policies")]  # one of your own wins
    custom = Settings(policy_paths=[tmp_path / "mine"])
    assert demo_policy_paths(custom) == [tmp_path / "mine"]  # configured: never replaced


@pytest.mark.parametrize("command", [["report"], ["status"], ["audit"], ["anomaly", "list"],
                                     ["budget", "status", "--policies", "policies.yml"]])
def test_read_commands_never_create_a_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    if "policies.yml" in command:
        (tmp_path / "policies.yml").write_text("policies: []\n")
    result = runner.invoke(app, command)
    assert result.exit_code != 0
    assert "no costguard database at costguard.db" in result.output
    assert {p.name for p in tmp_path.iterdir()} <= {"policies.yml"}  # nothing left behind


def test_compare_billed_without_bills_says_why_the_gaps_are_minus_100(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime, timedelta

    from costguard.report.run import render_report
    from costguard.store.db import Database
    from costguard.store.tables import CostIntervalRow

    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    now = datetime.now(UTC).replace(microsecond=0)
    with db.session() as s:
        s.add(CostIntervalRow(provider="sim", instance_id="i-1", account="1", region="r",
                              instance_type="g5.xlarge", lifecycle="on-demand", state="running",
                              start=now - timedelta(hours=2), end=now - timedelta(hours=1),
                              usd_per_hour=1.0, price_source="t", cost_micros=1_000_000,
                              gpu_count=1, gpu_seconds=3600, idle_gpu_seconds=0,
                              idle_cost_micros=0, team="ml"))
    db.dispose()
    out = tmp_path / "report.txt"
    render_report(Settings(database_url=url), ["team"], "1d", None, None, "table", out,
                  compare="billed", now=now)
    assert "No bills imported for this period" in out.read_text()
