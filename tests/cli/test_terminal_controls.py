"""What costguard prints is partly written by others (a team tag, a pod's annotation, a
billed line's tags): a terminal control in it is left out of what reaches a terminal, or
escaped in a log line, so it can neither command the terminal nor forge a line. Rich left
ESC (and 26 other controls) in what it printed (kubectl's CVE-2021-25743 is the same hole)."""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from costguard.cli import app
from costguard.daemon.logs import TextFormatter
from costguard.plain_lines import ShownConsole, print_data, shown
from costguard.store.db import Database
from tests.costs.fleet import add_interval

NOW = datetime(2026, 4, 10, 12, tzinfo=UTC)
HOSTILE = "re\x1b[2Jse\x1b]0;pwned\x07arch\x9b1m\x08\r\x00"
CONTROLS = [chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_shown_leaves_out_every_control_but_tab_and_line_break() -> None:
    assert shown("".join(CONTROLS) + "a\tb\nc\u00e9") == "a\tb\nc\u00e9"
    assert shown(HOSTILE) == "re[2Jse]0;pwnedarch1m"


def test_a_terminal_gets_rich_styles_but_not_the_text_s_controls() -> None:
    tty = _Tty()
    console = ShownConsole(file=tty, width=60, force_terminal=True, color_system="standard")
    table = Table("team", "cost")
    table.add_row(HOSTILE, "$1")
    table.add_row("[bold]vision[/]", "$2")
    console.print(table)
    console.print(f"[red]error:[/] {HOSTILE}")
    out = tty.getvalue()
    assert "\x1b[31merror:" in out and "\x1b[1m" in out  # rich's own codes still work
    assert "\x1b[2J" not in out and "\x1b]0" not in out and "\x07" not in out
    assert "\x9b" not in out and "\x08" not in out and "\x00" not in out
    widths = {len(line) for line in out.splitlines()[:6] if "\x1b" not in line}
    assert len(widths) == 1  # the table's columns still line up
    assert "re[2Jse]0;pwnedarch1m" in out


@pytest.mark.parametrize("tty", [True, False])
def test_data_is_shown_on_a_terminal_and_kept_in_a_pipe(
        tty: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    print_data(f"team\n{HOSTILE}", end="")
    assert out.getvalue() == ("team\nre[2Jse]0;pwnedarch1m" if tty else f"team\n{HOSTILE}")


def test_report_prints_a_hostile_team_without_its_controls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    with db.session() as s:
        add_interval(s, "i-1", NOW - timedelta(days=2), 24, 3.0, team=HOSTILE)
        s.commit()
    db.dispose()
    done = CliRunner().invoke(app, ["--database", url, "report", "--by", "team", "--since",
                                    "2026-04-01", "--until", "2026-04-10"],
                              terminal_width=120)
    assert done.exit_code == 0, done.output
    assert "re[2Jse]0;pwne" in done.output  # the rest wraps onto the cell's next line
    assert not [c for c in CONTROLS if c in done.output]


def _line(message: str, *args: object, **fields: object) -> str:
    record = logging.makeLogRecord({"msg": message, "args": args, "levelname": "INFO",
                                    "name": "costguard.act", **fields})
    return TextFormatter().format(record)


def test_a_log_line_escapes_controls_and_indents_what_a_line_break_starts() -> None:
    forged = "gpu-box\n2026-04-10 12:00:00,000 INFO costguard.act: nothing stopped\x1b[2J\r"
    line = _line("stopping %s", forged, instance="i-\x1b[2J")
    head, _, rest = line.partition("\n")
    assert head.endswith(" INFO costguard.act: stopping gpu-box")
    assert rest == ('    2026-04-10 12:00:00,000 INFO costguard.act: nothing stopped'
                    '\\x1b[2J\\x0d instance="i-\\u001b[2J"')
    assert "\x1b" not in line and "\r" not in line
    # a plain message is as it was, and the record is left as it came
    assert _line("cycle done in %.1fs", 1.25).endswith(" INFO costguard.act: cycle done in 1.2s")
