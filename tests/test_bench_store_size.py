"""The store-size bench measures what it says: readings written through the store's own
writer, each GPU-minute once, the tables' bytes with their indexes, as rows and settled."""

from __future__ import annotations

from pathlib import Path

from bench.store_size import HISTORY, ROWS, SETTLED, fill, row, settle, sqlite_bytes


def test_a_gpu_minute_costs_what_its_rows_and_indexes_take(tmp_path: Path) -> None:
    small, big = tmp_path / "small.db", tmp_path / "big.db"
    minutes = fill(f"sqlite:///{small}", hosts=1, gpus=2, hours=1)
    assert minutes == 2 * 60
    more = fill(f"sqlite:///{big}", hosts=2, gpus=4, hours=2)
    assert more == 2 * 4 * 120
    few, how = sqlite_bytes(small)
    many, _ = sqlite_bytes(big)
    assert "dbstat" in how or "file" in how
    assert many > few  # the bytes grow with the readings, not a constant
    line = row("sqlite", more, many, how)
    per = line["bytes_per_gpu_minute"]
    assert isinstance(per, float) and 150 < per < 1000  # a ~30-column row and its indexes
    assert line["gb_1k_hosts"] == round(many / more * 1440 * 7 * 8 * 1000 / 1e9, 1)
    assert line["met"] == "no"


def test_settled_readings_are_measured_in_their_own_tables(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    minutes = fill(f"sqlite:///{path}", hosts=2, gpus=4, hours=3)
    as_rows, _ = sqlite_bytes(path, ROWS)
    empty = sqlite_bytes(path, SETTLED)[0]
    assert empty <= 4 * 4096  # empty tables and indexes: a root page each
    assert settle(f"sqlite:///{path}", hours=2) == 2 * 4 * 120  # the third hour is settling
    assert settle(f"sqlite:///{path}", hours=3) == 2 * 4 * 60
    blocks, how = sqlite_bytes(path, SETTLED)
    history, _ = sqlite_bytes(path, HISTORY)
    assert blocks > empty and history > 0
    line = row("sqlite", minutes, blocks, how, history=history,
               per_row_minute=as_rows / minutes)
    assert line["bytes_per_gpu_minute"] == round(blocks / minutes, 1)
    assert line["history_bytes_per_gpu_hour"] == round(history / (minutes / 60), 1)
    per, per_hour = blocks / minutes, history / (minutes / 60)
    host = (per * 1440 * 7 * 8 + as_rows / minutes * 60 * 2 * 8 + per_hour * 24 * 395 * 8)
    assert line["gb_1k_hosts"] == round(host * 1000 / 1e9, 1)
