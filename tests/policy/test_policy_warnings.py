"""Policies whose stop or terminate would meet controller-owned members get a warning at the
step, with the fix; policies that already handle them (managed: false, scale_in) do not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.policy.load import load_with_warnings

REPO = Path(__file__).resolve().parents[2]

HEAD = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true%s}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
"""


def _write(tmp_path: Path, extra_filter: str, steps: str) -> Path:
    path = tmp_path / "p.yml"
    path.write_text(HEAD % extra_filter + steps, encoding="utf-8")
    return path


def test_a_stop_that_admits_managed_members_is_warned_at_the_step(tmp_path: Path) -> None:
    path = _write(tmp_path, "", "      - stop: {grace: 15m}\n")
    policies, warnings = load_with_warnings([path])
    assert len(policies.policies) == 1  # a warning never stops a policy from loading
    [w] = warnings
    assert (w.file, w.line, w.column) == (str(path), 9, 9)
    assert "never stops those" in w.message
    assert "managed: false" in w.message and "scale_in" in w.message


def test_terminate_is_warned_too(tmp_path: Path) -> None:
    steps = "      - stop: {grace: 15m}\n      - terminate: {after_stopped: 7d}\n"
    [w] = load_with_warnings([_write(tmp_path, "", steps)])[1]
    assert w.line == 9  # at the first acting step


def test_no_warning_when_the_policy_handles_managed_members(tmp_path: Path) -> None:
    for extra, steps in ((", managed: false", "      - stop\n"),
                         ("", "      - stop\n      - scale_in\n"),
                         ("", "      - tag: {set: {a: b}}\n")):
        assert load_with_warnings([_write(tmp_path, extra, steps)])[1] == []
    assert load_with_warnings([REPO / "policies"])[1] == []  # the shipped policies


def test_validate_prints_the_warning_and_still_exits_0(tmp_path: Path) -> None:
    path = _write(tmp_path, "", "      - stop\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert f"{path}:9:9: warning: policy 'idle'" in result.output
    assert "1 warning(s)" in result.output


def test_validate_json_lists_problems_and_warnings_with_positions(tmp_path: Path) -> None:
    path = _write(tmp_path, "", "      - stop\n")
    ok = CliRunner().invoke(app, ["validate", str(path), "--format", "json"])
    body = json.loads(ok.output)
    assert ok.exit_code == 0 and body["ok"] is True
    assert body["warnings"][0]["line"] == 9 and body["policies"] == [
        {"name": "idle", "mode": "enforce", "resource": "instance"}]
    path.write_text("policies:\n  - name: x\n    mode: sometimes\n", encoding="utf-8")
    bad = CliRunner().invoke(app, ["validate", str(path), "--format", "json"])
    body = json.loads(bad.output)
    assert bad.exit_code == 2 and body["ok"] is False
    assert {"file", "line", "column", "message"} <= set(body["problems"][0])


@pytest.mark.parametrize(("mode", "warned"), [("optional", True), ("required", False)])
def test_agent_evidence_is_warned_while_any_token_holder_can_push_for_any_instance(
        workdir_with: Callable[[str], Path], mode: str, warned: bool) -> None:
    # `idle: {evidence: agent}` trusts what agents push; the shared token, still accepted
    # for every instance while http.identity.mode is optional, can push for any of them
    folder = workdir_with(mode)
    result = CliRunner().invoke(app, ["validate", "--format", "json"])
    assert result.exit_code == 0, result.output
    found = [(Path(w["file"]).name, w["line"], w["column"], w["message"])
             for w in json.loads(result.stdout)["warnings"]]
    if not warned:
        assert found == []
        return
    assert found == [("strict.yaml", 5, 44, (  # at `agent`
        "warning: policy 'strict-idle' counts only the agent's readings as idle evidence, "
        "but http.identity.mode is optional: whoever holds the agent token can push "
        "readings for any instance. Fix: set http.identity.mode: required, so that only an "
        "instance's own agent can (docs/agent.md)"))]
    assert folder.is_dir()
    # the policies alone (no settings read): nothing to compare with, nothing said
    alone = CliRunner().invoke(app, ["validate", str(folder / "policies")])
    assert alone.exit_code == 0 and "warning" not in alone.output


@pytest.fixture
def workdir_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    def make(mode: str) -> Path:
        (tmp_path / "policies").mkdir()
        (tmp_path / "policies" / "strict.yaml").write_text(
            "policies:\n"
            "  - name: strict-idle\n"
            "    filters: {gpu: true}\n"
            "    condition:\n"
            "      idle: {below: 5, for: 45m, evidence: agent}\n"
            "    actions: [{notify: {to: owner}}]\n", encoding="utf-8")
        (tmp_path / "costguard.yaml").write_text(
            f"policy_paths: [policies]\nhttp:\n  identity:\n    mode: {mode}\n",
            encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        return tmp_path
    return make
