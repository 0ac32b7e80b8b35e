"""Fit a rich table to the terminal without ever cutting a number.

rich shrinks a too-wide table by squeezing every column, money included (`$3,260…`).
Here each numeric column gets a fixed width: its widest figure (or the longest word of
its header, which wraps at spaces), and so does each key column (what identifies a row: an
instance id, a budget's name), its longest value. Text columns (team, instance names) take what is
left and fold onto more lines when short of room. When even that does not fit, the
least important numeric columns are left out, named in `FittedTable.dropped` so the
caller can say so under the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.table import Table

TEXT_MIN = 12  # a text column is not squeezed below this many characters while columns can go
PADDING = 2  # one space either side of each cell (rich's default)


@dataclass(frozen=True)
class FitColumn:
    """One column: its header, a cell per row and its footer (the total row)."""

    header: str
    cells: Sequence[str]
    footer: str = ""
    numeric: bool = False
    # identifies its row (an instance id, a budget's name): shown whole like a figure,
    # left-aligned; other text columns wrap and numeric ones go first
    key: bool = False

    @property
    def fixed(self) -> bool:
        return self.numeric or self.key


@dataclass
class FittedTable:
    table: Table
    dropped: list[str] = field(default_factory=list)


def numeric_width(col: FitColumn) -> int:
    """The width that shows every figure whole and breaks the header only at spaces."""
    words = [cell_len(w) for w in col.header.split()] or [0]
    return max([cell_len(c) for c in col.cells] + [cell_len(col.footer), *words])


def text_width(col: FitColumn) -> int:
    return max([cell_len(c) for c in col.cells] + [cell_len(col.footer), cell_len(col.header)])


def needed_width(cols: Sequence[FitColumn], text_floor: int) -> int:
    """Characters the table takes with text columns at most `text_floor` wide (borders in)."""
    inner = sum(numeric_width(c) if c.numeric else text_width(c) if c.key
                else min(text_width(c), text_floor) for c in cols)
    return inner + PADDING * len(cols) + len(cols) + 1


def choose_columns(cols: Sequence[FitColumn], width: int,
                   drop_order: Sequence[str]) -> tuple[list[FitColumn], list[str], int]:
    """The columns to keep at `width`, the headers left out, and the text columns' floor.

    Columns in `drop_order` go first to last until the rest fit with text columns at
    TEXT_MIN; then the text floor is lowered (down to 1) before giving up.
    """
    kept, dropped = list(cols), []
    for name in drop_order:
        if needed_width(kept, TEXT_MIN) <= width:
            break
        if any(c.header == name for c in kept):
            kept = [c for c in kept if c.header != name]
            dropped.append(name)
    floor = TEXT_MIN
    while floor > 1 and needed_width(kept, floor) > width:
        floor -= 1
    return kept, dropped, floor


def fit_table(cols: Sequence[FitColumn], width: int, drop_order: Sequence[str], *,
              title: str | None = None, row_styles: Sequence[str | None] = ()) -> FittedTable:
    """A Table of `cols` that fits `width` columns with every number whole.

    If even the key columns and the columns not in `drop_order` cannot fit, the table is
    made as wide as it must be: print it with `crop=False` and the terminal wraps lines
    rather than rich cutting figures.
    """
    kept, dropped, floor = choose_columns(cols, width, drop_order)
    needed = needed_width(kept, floor)
    if title is not None and len(title) > needed:
        # wider than the table: a line per part ("Spend by team", the period, the filters)
        # rather than rich's break wherever the width ends ("UTC" alone on a line)
        title = title.replace("  ", "\n")
    table = Table(title=title, title_justify="left",
                  show_footer=any(c.footer for c in kept))
    if needed > width:
        table.width = needed
    for c in kept:
        if c.numeric:
            table.add_column(c.header, footer=c.footer, justify="right",
                             width=numeric_width(c))
        elif c.key:
            table.add_column(c.header, footer=c.footer, width=text_width(c), no_wrap=True)
        else:
            table.add_column(c.header, footer=c.footer, overflow="fold")
    rows = max((len(c.cells) for c in kept), default=0)
    styles = list(row_styles) + [None] * (rows - len(row_styles))
    for i in range(rows):
        table.add_row(*(c.cells[i] for c in kept), style=styles[i])
    return FittedTable(table, dropped)


__all__ = ["FitColumn", "FittedTable", "choose_columns", "fit_table", "needed_width",
           "numeric_width"]
