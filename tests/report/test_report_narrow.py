"""The report table in narrow terminals: every figure whole, text folds, columns left out."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.cells import cell_len
from rich.console import Console

from costguard.report.fit import FitColumn, choose_columns, needed_width
from costguard.report.render import DROP_ORDER
from costguard.report.run import render_report
from costguard.store.db import Database
from tests.costs.fleet import T0, add_interval

END = T0 + timedelta(days=2)
TEAMS = {"research": 70.0, "ml-platform-inference": 9.5, "nlp": 3.2, None: 1.1}


@pytest.fixture
def settings(db_url: str) -> SimpleNamespace:
    """Thousands of dollars a team, as in `make demo`: wide figures, a long team name."""
    db = Database(db_url)
    with db.session() as s:
        for i, (team, rate) in enumerate(TEAMS.items()):
            add_interval(s, f"i-{i}", T0, 47, rate, team=team, idle=(i == 1))
            add_interval(s, f"i-{i}s", T0, 40, rate / 7, team=team, itype="g5.xlarge",
                         gpus=1, spot=True)
    db.dispose()
    return SimpleNamespace(database_url=db_url)


def _money(usd: float) -> str:
    return f"{'-' if usd < 0 else ''}${abs(usd):,.2f}"


def _figures(settings: SimpleNamespace, tmp_path: Path,
             compare: str | None) -> dict[str, list[str]]:
    """Each table column's figures (rows then total), from the JSON report of the same data."""
    out = tmp_path / "r.json"
    render_report(settings, ["team"], T0, END, None, "json", out, now=END, compare=compare)
    doc = json.loads(out.read_text())
    rows = [*doc["rows"], doc["total"]]
    cols = {"cost": [_money(r["cost_usd"]) for r in rows],
            "idle cost": [_money(r["idle_cost_usd"]) for r in rows],
            "GPU-h": [f"{r['gpu_hours']:,.1f}" for r in rows],
            "spot savings possible": [_money(r["spot_savings_possible_usd"]) for r in rows]}
    if compare:
        cols["billed"] = [_money(r["billed_usd"]) for r in rows]
        cols["gap (billed - estimated)"] = [_money(r["gap_usd"]) for r in rows]
    return cols


def _columns(text: str) -> dict[str, list[str]]:
    """The printed table by column: header (its wrapped lines joined) -> non-blank cells."""
    lines = text.splitlines()
    heads = [[c.strip() for c in ln.split("┃")[1:-1]] for ln in lines if ln.startswith("┃")]
    names = [" ".join(filter(None, parts)) for parts in zip(*heads, strict=True)]
    body = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines if ln.startswith("│")]
    return {name: [row[i] for row in body if row[i]] for i, name in enumerate(names)}


def _table(settings: SimpleNamespace, width: int, compare: str | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, no_color=True, legacy_windows=False)
    render_report(settings, ["team"], T0, END, None, "table", None, now=END, compare=compare,
                  console=console)
    return buf.getvalue()


@pytest.mark.parametrize(("width", "compare", "left_out"), [
    (80, None, ["instances"]),
    # by hand: team 12 + 2 padding, then cost 9+2, idle cost 7+2, idle % 4+2 (its header
    # word "idle"), GPU-h 7+2, spot % 4+2, savings 9+2, instances 9+2, and 9 borders: 86
    (60, None, ["instances", "spot %", "idle %"]),
    (80, "billed", ["instances", "spot %", "idle %", "GPU-h"]),
])
def test_every_figure_shown_is_whole_and_left_out_columns_are_named(
        settings: SimpleNamespace, tmp_path: Path, width: int, compare: str | None,
        left_out: list[str]) -> None:
    text = _table(settings, width, compare)
    assert "…" not in text
    assert all(cell_len(line) <= width for line in text.splitlines()), text
    figures = _figures(settings, tmp_path, compare)
    # as wide as in `make demo`, where rich used to cut them ($3,267…)
    assert figures["cost"][0] == "$3,690.00" and figures["cost"][-1] == "$4,417.46"
    footnote = " ".join(text.split("Left out to fit", 1)[1].split())
    assert footnote.startswith(f"{width} columns: {', '.join(left_out)}.")
    shown = _columns(text)
    assert not set(left_out) & set(shown)
    for name, values in figures.items():
        if name not in left_out:
            assert shown[name] == values, name


def test_a_wide_terminal_shows_every_column_and_no_footnote(settings: SimpleNamespace) -> None:
    text = _table(settings, 160)
    assert "Left out" not in text
    assert list(_columns(text)) == ["team", "cost", "idle cost", "idle %", "GPU-h", "spot %",
                                    "spot savings possible", "instances"]
    assert "ml-platform-inference" in _columns(text)["team"]


def test_long_team_names_fold_rather_than_lose_letters(settings: SimpleNamespace) -> None:
    text = _table(settings, 60)
    names = "".join(line.split("│")[1].strip() for line in text.splitlines()
                    if line.startswith("│"))
    assert "ml-platform-inference" in names and "unattributed" in names


def test_too_narrow_for_even_the_cost_column_prints_it_whole_past_the_edge(
        settings: SimpleNamespace) -> None:
    text = _table(settings, 20)
    assert "$4,417.46" in text and "…" not in text
    assert "Left out to fit 20 columns" in " ".join(text.split())


def test_drop_order_is_by_importance_and_cost_never_goes() -> None:
    cols = [FitColumn("team", ["research"], "total"),
            *(FitColumn(name, ["$1,234,567.89"], "$1,234,567.89", numeric=True)
              for name in ("cost", "idle cost", "instances"))]
    kept, dropped, floor = choose_columns(cols, 10, DROP_ORDER)
    assert [c.header for c in kept] == ["team", "cost"]
    assert dropped == ["instances", "idle cost"] and floor == 1
    # team at 1 character + cost at 13, one space either side, three borders
    assert needed_width(kept, floor) == 1 + 13 + 2 * 2 + 3


def test_a_title_wider_than_its_table_breaks_between_its_parts(
        settings: SimpleNamespace) -> None:
    # the title (what, when: 54 characters) is wider than the table at 50 columns: rich broke
    # it wherever the table's width ended, leaving "UTC" (or half a date) on a line alone
    head = [line.rstrip() for line in _table(settings, 50).splitlines()[:2]]
    assert head[0] == "Spend by team"
    assert head[1].startswith(f"{T0:%Y-%m-%d %H:%M} → ") and head[1].endswith(" UTC")
    wide = _table(settings, 160).splitlines()[0].rstrip()  # it fits: one line, as before
    assert wide.startswith("Spend by team  ") and wide.endswith(" UTC")
