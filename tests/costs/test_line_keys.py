"""The imported lines' keys, kept per day as blobs: a line imported once is known again,
whether the day was held all along, let go and read back within the import, or written by
an earlier import."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from costguard.billing import line_keys
from costguard.billing.line_keys import LineKeys, Replacing, pack, unpack
from costguard.store.bill_tables import BillingLineKeyRow
from costguard.store.db import Database


def add(keys: LineKeys, pairs: list[tuple[int, int]]) -> list[bool]:
    """`keys.add` of (day, key) pairs."""
    return keys.add([day for day, _ in pairs], [key for _, key in pairs])


def test_keys_pack_as_signed_64_bit_integers() -> None:
    keys = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012345678]
    assert list(unpack(pack(keys))) == keys
    assert pack([1]) == b"\x01" + b"\x00" * 7  # little-endian, whatever the machine


def test_a_day_let_go_and_read_back_still_knows_its_lines(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_keys, "HELD_DAYS", 2)
    days = [20_400 + d for d in range(6)]
    lines = [(day, day * 1_000 + n) for n in range(50) for day in days]  # days interleaved
    with db.session() as s:
        keys = LineKeys(s, "focus")
        assert add(keys, lines[:150]) == [False] * 150
        # the first 150 again (their days let go and read back), with the rest new
        assert add(keys, lines) == [True] * 150 + [False] * (len(lines) - 150)
        assert add(keys, [(days[0], -5), (days[0], -5)]) == [False, True]  # twice in one go
        keys.finish()
    with db.session() as s:  # a later import: every line is known, nothing written twice
        again = LineKeys(s, "focus")
        assert add(again, lines) == [True] * len(lines)
        assert add(again, [(days[0], 7)]) == [False]
        again.finish()
        other = LineKeys(s, "aws-cur")  # keys are per source
        assert add(other, lines[:3]) == [False] * 3
        written = s.scalar(select(func.count()).select_from(BillingLineKeyRow).where(
            BillingLineKeyRow.source == "focus", BillingLineKeyRow.day == days[0]))
        stored = [k for (blob,) in s.execute(select(BillingLineKeyRow.line_keys).where(
            BillingLineKeyRow.source == "focus")) for k in unpack(blob)]
    assert written is not None and written >= 2  # chunks: let go mid-import, then the later one
    assert sorted(stored) == sorted([k for _, k in lines] + [-5, 7])


def test_replacing_empties_a_day_once_and_of_its_own_source_only(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_keys, "HELD_DAYS", 1)  # a day let go and read back mid-import
    day, other_day = 20_400, 20_401
    with db.session() as s:
        for source in ("focus", "aws-cur"):
            keys = LineKeys(s, source)
            add(keys, [(day, 1), (day, 2), (other_day, 3)])
            keys.finish()
    replacing = Replacing()
    with db.session() as s:
        keys = LineKeys(s, "focus", replacing)
        assert add(keys, [(day, 1), (day, 9)]) == [False, False]  # the day's keys are gone
        assert add(keys, [(other_day, 4)]) == [False]  # (`day` let go)
        assert add(keys, [(day, 9), (day, 2)]) == [True, False]  # read back, not emptied twice
        keys.finish()
        assert sorted(replacing.days) == [("focus", day), ("focus", other_day)]
        untouched = LineKeys(s, "aws-cur")
        assert add(untouched, [(day, 1), (other_day, 3)]) == [True, True]
