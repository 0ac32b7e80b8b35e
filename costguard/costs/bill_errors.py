"""What every billing-file reader raises, and how a cell becomes a number."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from costguard.errors import CostguardError


class BillingImportError(CostguardError, ValueError):
    """A billing file costguard cannot read; the message names the line and the fix."""


def decimal_of(value: object, where: str) -> Decimal:
    """A finite number from a cell (text, int, float or Decimal), or BillingImportError."""
    try:
        out = Decimal(str(value).strip())
    except InvalidOperation:
        raise BillingImportError(f"{where}: {value!r} is not a number") from None
    if not out.is_finite():
        raise BillingImportError(f"{where}: {value!r} is not a number")
    return out
