"""Text from outside kept to what its column holds.

PostgreSQL refuses a value longer than its VARCHAR (SQLite keeps any length), and with it
the whole statement: one long tag failed a cycle's accrual, one long name the inventory's
write, one long ARN a bill's import. Those values are cut instead, by this one rule
(characters, as PostgreSQL counts them), where they are made: attribution, the inventory's
listing, a billed line."""

from __future__ import annotations


def cut(text: str | None, most: int) -> str | None:
    """`text` with at most `most` characters."""
    return text[:most] if text is not None and len(text) > most else text
