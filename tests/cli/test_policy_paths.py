"""Every command reads the policies the configuration names, and a missing one is an error
that says where policies are configured (#20 items 1 and 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG", "COSTGUARD_POLICY_PATHS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_budget_status_reads_the_configured_policies(workdir: Path) -> None:
    mine = workdir / "elsewhere"
    shutil.copytree(REPO / "policies", mine)
    (workdir / "costguard.yaml").write_text(f"policy_paths: [{mine}]\n")
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    result = runner.invoke(app, ["budget", "status", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert {b["budget"] for b in json.loads(result.output)} == {
        "research-monthly", "ml-platform-monthly", "dev-account-monthly"}


@pytest.mark.parametrize("argv", [
    ["budget", "status", "--policies", "/nonexistent"],
    ["billing", "import", "bill.csv", "--policies", "/nonexistent"],
])
def test_a_policies_option_naming_nothing_is_exit_2(workdir: Path, argv: list[str]) -> None:
    (workdir / "bill.csv").write_text("BilledCost\n")
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "/nonexistent:1:1: no such file or directory" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("argv", [
    ["run", "--once"], ["budget", "status"], ["iam", "--provider", "aws"],
    ["snooze", "i-1", "--reason", "demo day"],
])
def test_missing_configured_policies_say_where_policies_are_configured(
        workdir: Path, argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "policies:1:1: no such file or directory" in text
    assert "policy_paths in costguard.yaml or COSTGUARD_POLICY_PATHS (now: policies)" in text
    assert "costguard init DIR" in text
    assert not (workdir / "costguard.db").exists()
