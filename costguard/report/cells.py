"""Text cells of costguard's CSV files, safe to open in a spreadsheet."""

from __future__ import annotations

# what makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: str) -> str:
    """`value` (a tag's, a name's: text anyone who can tag an instance wrote) with a leading
    apostrophe when it would start a formula: `=HYPERLINK(...)` as a team would run in the
    FinOps lead's spreadsheet. Figures are costguard's own and never pass through here."""
    return f"'{value}" if value.startswith(_FORMULA_START) else value
