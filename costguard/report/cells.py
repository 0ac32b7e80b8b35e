"""Text cells of costguard's CSV files, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

# what makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: str) -> str:
    """`value` (a tag's, a name's: text anyone who can tag an instance wrote) with a leading
    apostrophe when it would start a formula: `=HYPERLINK(...)` as a team would run in the
    FinOps lead's spreadsheet. Figures are costguard's own and never pass through here."""
    return f"'{value}" if value.startswith(_FORMULA_START) else value


def _safe(value: object) -> str:
    text = "" if value is None else str(value)
    if not text.startswith(_FORMULA_START):
        return text
    try:
        float(text)  # a figure (-12.50) is no formula; "-1+1" or "=1" is
    except ValueError:
        return f"'{text}"
    return text if text.isascii() and "\r" not in text and "\t" not in text else f"'{text}"


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """Every CSV costguard writes, one function: each cell that would start a formula and is
    not a plain number gets a leading apostrophe (text_cell's rule, for every cell), and a
    row with a cell holding any line break, a lone CR too, is written fully quoted (the csv
    module quotes only the characters of its own line ending, `\\n` here, so a bare CR went
    out unquoted and a spreadsheet started a new row there)."""
    buf = io.StringIO()
    minimal = csv.writer(buf, lineterminator="\n")
    quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in rows:
        cells = [_safe(v) for v in row]
        (quoted if any("\r" in c or "\n" in c for c in cells) else minimal).writerow(cells)
    return buf.getvalue()
