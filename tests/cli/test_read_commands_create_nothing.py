"""Read commands never create a store, and every one honours `costguard --database`:
`alerts list` read the configured store (and so created ./costguard.db in an empty
directory) whatever --database said."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app

READS = [["alerts", "list"], ["status"], ["report", "--by", "team"], ["recommend"],
         ["audit"], ["explain", "i-0abc"], ["budget", "status"], ["anomaly", "list"]]


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_a_read_command_creates_no_store(argv: list[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").symlink_to(Path(__file__).resolve().parents[2] / "policies")
    named = tmp_path / "named.db"
    result = CliRunner().invoke(app, ["--database", str(named), *argv])
    assert result.exit_code != 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policies"], result.output
    said = " ".join(result.output.split())
    assert str(named) in said or "no costguard database" in said, said
