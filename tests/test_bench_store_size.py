"""The store-size bench measures what it says: readings written through the store's own
writer, each GPU-minute once, and the table's bytes with its indexes."""

from __future__ import annotations

from pathlib import Path

from bench.store_size import fill, row, sqlite_bytes


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
    assert line["gb_1k_hosts_35d"] == round(many / more * 1440 * 35 * 8 * 1000 / 1e9, 1)
