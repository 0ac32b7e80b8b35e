"""`costguard validate` with no paths: costguard.yaml, the variables, the policies it names,
and the routing and price override files, all checked in one run, each problem located."""

from __future__ import annotations

import json
import os
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
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    for var in [v for v in os.environ if v.startswith("COSTGUARD_")]:
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _config(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text(
        "policy_paths: [policies]\nalerts:\n  routing_file: routes.yaml\n"
        "costs:\n  price_overrides: prices.yml\n")
    (workdir / "routes.yaml").write_text('teams:\n  research:\n    slack: "#research"\n')
    (workdir / "prices.yml").write_text("discounts:\n  - {provider: aws, percent: 12}\n")


def test_a_good_setup_is_ok_and_names_what_was_read(workdir: Path) -> None:
    _config(workdir)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("configuration ok; 4 policies")
    assert "alerts.routing_file routes.yaml" in result.output
    assert "costs.price_overrides prices.yml" in result.output


def test_every_broken_file_is_reported_in_one_run(workdir: Path) -> None:
    _config(workdir)
    (workdir / "routes.yaml").write_text('teams:\n  research:\n    slak: "#research"\n')
    (workdir / "prices.yml").write_text("price: []\n")
    idle = workdir / "policies" / "idle-gpu.yml"
    idle.write_text(idle.read_text().replace("mode: dry-run", "mode: banana", 1))
    result = runner.invoke(app, ["validate", "--format", "json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    where = {(Path(p["file"]).name, p["line"], p["column"]): p["message"]
             for p in doc["problems"]}
    assert where[("routes.yaml", 3, 5)].startswith("teams.research: unknown key 'slak'")
    assert where[("prices.yml", 1, 1)].endswith("did you mean 'prices'?")
    (line,) = [k for k in where if k[0] == "idle-gpu.yml"]
    assert "banana" in where[line]
    assert len(doc["problems"]) == 3


def test_a_broken_config_file_is_located_and_stops_there(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text("policy_paths: [policies]\npol_interval: 5m\n")
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert "costguard.yaml:2:1: unknown key 'pol_interval'" in result.output
    assert "did you mean 'poll_interval'?" in result.output
    assert "1 problem(s) found" in result.output


def test_a_bad_variable_is_a_problem_without_a_place(workdir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTGUARD_HTTP__PORT", "eighty")
    result = runner.invoke(app, ["validate", "--format", "json"])
    assert result.exit_code == 2
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["file"] is None and problem["line"] is None
    assert problem["message"].startswith("http.port: ")
    assert problem["message"].endswith("(from COSTGUARD_HTTP__PORT)")


def test_a_missing_named_file_is_a_problem(workdir: Path) -> None:
    _config(workdir)
    (workdir / "routes.yaml").unlink()
    result = runner.invoke(app, ["validate", "--config", "costguard.yaml"])
    assert result.exit_code == 2
    assert "routes.yaml:1:1: cannot read routing file" in result.output


def test_with_paths_only_the_policies_are_checked(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text("pol_interval: 5m\n")  # not read
    result = runner.invoke(app, ["validate", "policies"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: 4 policies")
