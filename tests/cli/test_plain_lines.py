"""Output piped or written to a file carries no trailing spaces (rich pads centred titles
and keeps the space where it wraps); a terminal gets rich's output untouched."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.plain_lines import TrimmedLines, file_console
from costguard.store.db import Database
from tests.costs.fleet import add_interval

NOW = datetime(2026, 4, 10, 12, tzinfo=UTC)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_lose_trailing_spaces_when_not_a_terminal() -> None:
    out = io.StringIO()
    lines = TrimmedLines(lambda: out)
    lines.write("title   \nwrapped at a space \n  indented")
    assert out.getvalue() == "title\nwrapped at a space\n"  # the open line waits
    lines.write(" stays\t \n")
    assert out.getvalue() == "title\nwrapped at a space\n  indented stays\n"


def test_a_line_left_open_is_written_as_it_is_on_flush() -> None:
    out = io.StringIO()
    lines = TrimmedLines(lambda: out)
    lines.write("Continue? ")
    lines.flush()
    assert out.getvalue() == "Continue? "


def test_a_terminal_gets_the_text_untouched() -> None:
    tty = _Tty()
    lines = TrimmedLines(lambda: tty)
    lines.write("title   \n")
    assert tty.getvalue() == "title   \n" and lines.isatty()


def test_the_target_is_asked_at_each_write() -> None:
    first, second = io.StringIO(), io.StringIO()
    current = [first]
    lines = TrimmedLines(lambda: current[0])
    lines.write("a \n")
    current[0] = second
    lines.write("b \n")
    assert (first.getvalue(), second.getvalue()) == ("a\n", "b\n")


def test_a_file_console_centres_a_title_without_padding_its_end(tmp_path: Path) -> None:
    from rich.table import Table

    table = Table(title="short")
    table.add_column("a wide column heading")
    with (tmp_path / "t.txt").open("w", encoding="utf-8") as fh:
        file_console(fh, width=60).print(table)
    text = (tmp_path / "t.txt").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "          short"  # centred over the table, no tail
    assert not [line for line in text.splitlines() if line != line.rstrip()]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    with db.session() as s:
        add_interval(s, "i-1", NOW - timedelta(days=2), 24, 3.0, team="research")
    db.dispose()
    return url


def _ends(text: str) -> list[str]:
    return [line for line in text.splitlines() if line != line.rstrip()]


def test_report_piped_and_written_to_a_file_has_no_trailing_spaces(
        store: str, tmp_path: Path) -> None:
    args = ["--database", store, "report", "--by", "team", "--since", "2026-04-01",
            "--until", "2026-04-10"]
    piped = CliRunner().invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
    assert piped.exit_code == 0, piped.output
    assert "Spend by team" in piped.output and "research" in piped.output
    assert _ends(piped.output) == []
    written = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "r.txt")])
    assert written.exit_code == 0, written.output
    text = (tmp_path / "r.txt").read_text(encoding="utf-8")
    assert "Spend by team" in text and _ends(text) == []
