"""The command line as a user meets it: exit codes, messages, no tracebacks."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from costguard.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_shipped_policies_validate(workdir: Path) -> None:
    result = runner.invoke(app, ["validate", "policies/"])
    assert result.exit_code == 0, result.output
    assert "ok:" in result.output


def test_broken_policy_exits_2_with_file_line_col_and_no_traceback(workdir: Path) -> None:
    bad = workdir / "bad.yml"
    bad.write_text("policies:\n  - name: x\n    mode: enforced\n    condition: {idle: {for: 1}}\n"
                   "    actions: [stop]\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:3:11:" in result.output
    assert "'dry-run' or 'enforce'" in result.output
    assert f"{bad}:4:" in result.output  # the second problem is reported too
    assert "Traceback" not in result.output


def test_help_of_every_command_has_an_example() -> None:
    for cmd in ("validate", "run", "demo", "report", "iam", "pause", "resume", "db upgrade",
                "agent replay", "agent record"):
        result = runner.invoke(app, [*cmd.split(), "--help"])
        assert result.exit_code == 0, cmd
        assert "Example" in result.output, cmd


def test_help_lists_the_first_hour_first_and_wraps_sentences_not_source_lines() -> None:
    wide = CliRunner(env={"COLUMNS": "200"})
    top = wide.invoke(app, ["--help"]).output
    listed = re.findall(r"^│ (\w+) ", top, re.M)
    assert listed[:6] == ["init", "demo", "validate", "run", "report", "explain"]
    # a docstring's line break is not a line break on screen (markdown help)
    demo = wide.invoke(app, ["demo", "--help"]).output
    assert "(or the one costguard --database names), emptied first" in demo
    status = wide.invoke(app, ["status", "--help"]).output
    assert re.search(r"Example: costguard status --format json\s*\n\s*\n\s*Exit status",
                     status)


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under `group` (a click group, as Typer builds it), groups included."""
    paths = [prefix]
    for name, command in group.commands.items():
        if getattr(command, "commands", None) is not None:
            paths += _command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


def test_every_help_fits_an_80_column_terminal_without_cutting_a_word() -> None:
    """rich cuts what does not fit its column with an ellipsis: an option's name, a default
    path, a permission. Nothing a person needs to read may be cut at 80 columns."""
    narrow = CliRunner(env={"COLUMNS": "80"})
    paths = _command_paths(typer.main.get_command(app))
    assert ("agent",) in paths and ("billing", "import") in paths
    for path in paths:
        result = narrow.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, path
        cut = [line for line in result.output.splitlines() if "\u2026" in line]
        assert not cut, (path, cut)


def test_run_once_prints_a_machine_readable_cycle_summary(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text("providers:\n  sim: {instances: 12}\n")
    result = runner.invoke(app, ["run", "--once", "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["instances"] == {"sim": 12}
    assert summary["gaps"] == []
    assert set(summary["actions"]) >= {"stopped", "warned", "skipped", "dry_run"}
    assert summary["actions"]["stopped"] == {}  # the shipped policies are dry-run


def test_demo_then_report_reads_the_same_database(workdir: Path) -> None:
    result = runner.invoke(app, ["demo", "--hours", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "idle warnings" in result.output and "stopped" in result.output
    assert not (workdir / "costguard.db").exists()  # the demo's spend is not the store's
    report = runner.invoke(app, ["--database", "costguard-demo.db", "report", "--by", "team",
                                 "--since", "7d", "--format", "json"])
    assert report.exit_code == 0, report.output
    doc = json.loads(report.output)
    teams = {row["team"] for row in doc["rows"]}
    assert "unattributed" in teams and "research" in teams
    assert doc["total"]["cost_usd"] > 0
    assert round(sum(r["cost_usd"] for r in doc["rows"]), 2) == doc["total"]["cost_usd"]
    # the demo's own summary line states the same total as the report
    said = re.search(r"no team\): \$([\d,]+\.\d\d) of \$([\d,]+\.\d\d)",
                     " ".join(result.output.split()))
    assert said is not None, result.output
    assert float(said.group(2).replace(",", "")) == doc["total"]["cost_usd"]


def test_report_rejects_an_unknown_dimension(workdir: Path) -> None:
    result = runner.invoke(app, ["report", "--by", "colour"])
    assert result.exit_code == 2
    assert "choose from" in result.output


def test_the_text_summary_is_a_line_per_part_whole_when_piped(workdir: Path) -> None:
    """Piped to a file or a log, rich wrapped each part at 80 columns, leaving a space at the
    end of the broken lines; a part stays one line, as `lines()` gives it."""
    result = runner.invoke(app, ["run", "--once"])
    assert result.exit_code == 0, result.output
    printed = result.output.splitlines()
    assert not [ln for ln in printed if ln != ln.rstrip()], printed
    spend = next(ln for ln in printed if ln.startswith("spend: "))
    assert len(spend) > 80 and re.search(r"alerts sent \d+$", spend), spend


def test_ctrl_c_during_run_once_is_exit_130_saying_what_was_kept(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.engine import Engine

    def interrupted(self: Engine) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Engine, "run_cycle", interrupted)
    result = runner.invoke(app, ["run", "--once"])
    assert result.exit_code == 130, result.output
    assert "interrupted: the cycle stopped and is marked interrupted" in result.output
    assert "Traceback" not in result.output


def test_bad_config_is_exit_2_with_the_fix(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text("databse_url: x\n")
    result = runner.invoke(app, ["run", "--once"])
    assert result.exit_code == 2
    assert "costguard.yaml:1:1: unknown key 'databse_url'" in result.output
    assert "did you mean 'database_url'?" in result.output
    assert "Traceback" not in result.output


def test_db_upgrade_and_pause_resume(workdir: Path) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    assert "paused" in runner.invoke(app, ["pause"]).output
    assert "resumed" in runner.invoke(app, ["resume"]).output


@pytest.mark.parametrize("argv", [
    ["run", "--once"], ["status"], ["db", "backup", "out.db"], ["anomaly", "list"],
    ["budget", "status"], ["alerts", "list"], ["audit"], ["report"],
])
def test_every_command_reports_a_bad_config_the_same_way(workdir: Path, argv: list[str]) -> None:
    # One error helper (costguard.cli_common) for all sub-commands: the same line, printed
    # literally (a bracket in the message is text, not markup), exit 2, no traceback.
    (workdir / "costguard.yaml").write_text('"[red]databse_url": x\n')
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: invalid configuration (costguard.yaml):\n")
    assert "  costguard.yaml:1:1: unknown key '[red]databse_url'" in result.output
    assert "Traceback" not in result.output


# `costguard validate` with no paths: costguard.yaml, the variables, the policies it names,
# the routing and price override files, all checked in one run, each problem located

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
    assert result.output.startswith("configuration ok; 11 policies")
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
    assert result.output.startswith("ok: 11 policies")


def test_identity_certificates_that_cannot_serve_are_problems(workdir: Path) -> None:
    (workdir / "costguard.yaml").write_text(
        "policy_paths: [policies]\nhttp:\n  identity:\n    aws_certs_dir: aws-certs\n"
        "    google_certs_file: google-keys.json\n")
    (workdir / "google-keys.json").write_text("[]")
    result = runner.invoke(app, ["validate", "--format", "json"])
    assert result.exit_code == 2, result.output
    problems = [p["message"] for p in json.loads(result.stdout)["problems"]]
    assert len(problems) == 2, problems
    assert problems[0].startswith("http.identity.aws_certs_dir: ")
    assert "aws-certs is not a folder" in problems[0]
    assert problems[1].startswith("http.identity.google_certs_file: ")
    assert "holds no Google keys" in problems[1]
    (workdir / "aws-certs").mkdir()
    (workdir / "aws-certs" / "default.pem").write_bytes(
        (Path(__file__).parents[2] / "costguard" / "daemon" / "data" / "aws_identity_certs"
         / "rsa" / "us-east-1.pem").read_bytes())
    (workdir / "google-keys.json").write_bytes(  # a snapshot of Google's keys (a JWK set)
        (Path(__file__).parents[1] / "fixtures" / "identity" / "gcp"
         / "google-v3-certs-2021-03.json").read_bytes())
    fixed = runner.invoke(app, ["validate"])
    assert fixed.exit_code == 0, fixed.output
    assert "http.identity.aws_certs_dir" in fixed.output
