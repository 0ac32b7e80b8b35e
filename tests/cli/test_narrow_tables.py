"""At 80 columns `budget status` and `audit` keep what identifies a row whole (instance ids
all read "i-sim070…" before) and leave out percentages and $/h first, saying so; the
journal's tag detail reads `set k=v`, not a Python dict; one GPU's memory is one figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.costs.fleet import add_interval

NOW = datetime(2026, 4, 10, 12, tzinfo=UTC)
LONG_POLICY = "on-demand-gpu-spot-candidate"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    with db.session() as s:
        for i in range(3):
            s.add(ActionJournalRow(
                key=f"k{i}", policy=LONG_POLICY, provider="sim",
                instance_id=f"i-sim0700000{i}", action="tag", dry_run=False, status="done",
                detail="set costguard:spot-candidate=2026-04-10T11:00:00+00:00 and a long "
                       "reason that wraps across the narrow terminal", usd_per_hour=12.5,
                intent_at=NOW - timedelta(hours=1), result_at=NOW))
        add_interval(s, "i-1", NOW - timedelta(days=2), 24, 3.0, team="research")
    db.dispose()
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "b.yml").write_text(
        "attribution:\n  dimensions:\n    team: {keys: [team]}\n"
        "budgets:\n  - {name: research-platform-monthly, dimension: team, value: research,"
        " monthly_usd: 50000}\n")
    return url


def test_audit_keeps_ids_and_policies_whole_at_80_columns(store: str) -> None:
    out = CliRunner().invoke(app, ["--database", store, "audit", "--since", "2026-04-01"],
                             env={"COLUMNS": "80"}, terminal_width=80).output
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for i in range(3):
        assert f"i-sim0700000{i}" in out
    assert LONG_POLICY in out and "…" not in out
    assert "Left out to fit 80 columns: $/h" in out


def test_budget_status_keeps_the_budget_name_whole_at_80_columns(store: str) -> None:
    out = CliRunner().invoke(app, ["--database", store, "budget", "status"],
                             env={"COLUMNS": "80"}, terminal_width=80).output
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "research-platform-monthly" in out and "…" not in out
    assert "$50,000" in out  # the budget itself stays; the percentages go first
    assert "Forecast: the spend so far plus the run rate" in " ".join(out.split())


def test_a_tag_action_is_journaled_as_key_value_pairs() -> None:
    from costguard.providers.base import tag_detail

    assert tag_detail({"costguard:idle-since": "2026-01-01T00:00:00+00:00", "a": "b"}) == (
        "set costguard:idle-since=2026-01-01T00:00:00+00:00, a=b")
    assert tag_detail({}, ["x", "y"]) == "removed x, y"
    assert tag_detail({"k": "v"}, ["x"]) == "set k=v; removed x"


def test_the_simulated_nvml_and_the_fits_agree_on_one_gpu_s_memory() -> None:
    from costguard.demo.sim_fleet import gpu_memory_mib
    from costguard.recommend.shapes import aws_shapes
    from costguard.telemetry.classify import gb

    # the A10G: 25.8 GB in the simulated NVML and 24.0 GB in the fit's risk line before
    assert gpu_memory_mib("g5.xlarge") == aws_shapes()["g5.xlarge"].gpu_memory_mib == 22888
    assert gb(22888 * 2**20) == gb(aws_shapes()["g5.12xlarge"].gpu_memory_mib * 2**20)
    assert gpu_memory_mib("m5.large") is None
