"""What every billing-file reader raises, and how a cell becomes a number."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from costguard.errors import CostguardError


class BillingImportError(CostguardError, ValueError):
    """A billing file costguard cannot read; the message names the line and the fix."""


# a plain decimal, as every export writes amounts: ASCII digits, an optional sign, point and
# exponent (Decimal() alone also read `1_000` as 1000 and Arabic-Indic digits as theirs)
_PLAIN = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def cell(value: object, most: int = 40) -> str:
    """A cell as a reason quotes it: its repr, cut after `most` characters with its length
    said (a 5,000-digit amount was quoted whole in the skipped line's reason)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= most:
        return repr(value)
    return f"{text[:most]!r}... ({len(text):,} characters)"


def decimal_of(value: object, where: str) -> Decimal:
    """A finite number from a cell (text, int, float or Decimal), or BillingImportError."""
    if isinstance(value, str) and not _PLAIN.fullmatch(value.strip()):
        raise BillingImportError(f"{where}: {cell(value)} is not a number")
    try:
        out = Decimal(str(value).strip())
    except InvalidOperation:
        raise BillingImportError(f"{where}: {cell(value)} is not a number") from None
    if not out.is_finite():
        raise BillingImportError(f"{where}: {cell(value)} is not a number")
    return out
