"""The agent's buffer file damaged (a power cut with the disk's cache on, a full disk, a
file written by something else): the agent used to refuse to start, and restart, for ever.
The damaged file is kept aside, named, and the agent goes on with an empty buffer; a file it
cannot write is still a one-line configuration error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from costguard.errors import ConfigError
from costguard.telemetry.buffer import DiskBuffer


def _filled(path: Path, records: int = 2_000) -> int:
    buffer = DiskBuffer(path)
    buffer.append([f'{{"n": {i}, "pad": "{"x" * 200}"}}' for i in range(records)])
    buffer.close()
    return path.stat().st_size


def _damaged(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        buffer = DiskBuffer(path)
    assert len(buffer) == 0 and buffer.peek(10) == []
    buffer.append(['{"n": "after"}'])
    assert [p.body for p in buffer.peek(10)] == ['{"n": "after"}']
    buffer.close()
    aside = [p for p in path.parent.iterdir() if p.name.startswith(f"{path.name}.damaged-")]
    assert len(aside) == 1, list(path.parent.iterdir())
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"the agent buffer {path} is damaged" in said and str(aside[0]) in said
    assert "summaries it held are lost" in said
    assert "hook" in said


def test_a_file_that_is_not_a_database_is_moved_aside(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "buffer.sqlite3"
    path.write_bytes(b"not a database " * 400)
    _damaged(path, caplog)
    assert (next(tmp_path.glob("buffer.sqlite3.damaged-*")).read_bytes()
            == b"not a database " * 400)  # kept as it was, for a person to look at


def test_a_damaged_page_inside_a_sound_header_is_found_at_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "buffer.sqlite3"
    size = _filled(path)
    with path.open("r+b") as fh:  # scribble over pages in the middle of the records
        fh.seek(size // 2)
        fh.write(b"\xa5" * 8192)
    _damaged(path, caplog)


def test_hooks_it_ran_are_kept_from_a_damaged_buffer_where_they_can_be_read(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "buffer.sqlite3"
    first = DiskBuffer(path)
    assert first.hook_claim("h-ran")
    first.hook_finish("h-ran", "succeeded", "signalled 2 processes")
    assert first.hook_claim("h-running")
    first.close()
    size = _filled(path)
    with path.open("r+b") as fh:  # the records' pages, past the hooks' table
        fh.seek(size - 16384)
        fh.write(b"\xa5" * 8192)
    _damaged(path, caplog)
    again = DiskBuffer(path)
    assert not again.hook_claim("h-ran") and not again.hook_claim("h-running")  # never twice
    assert again.hook_result("h-ran") == ("succeeded", "signalled 2 processes")
    assert again.hook_claim("h-new")
    again.close()
    assert "its record of 2 pre-stop hook(s) is kept" in caplog.text


def test_a_sound_buffer_keeps_its_records(tmp_path: Path) -> None:
    path = tmp_path / "buffer.sqlite3"
    _filled(path, 10)
    again = DiskBuffer(path)
    assert len(again) == 10
    again.close()
    assert [p.name for p in tmp_path.iterdir()] == ["buffer.sqlite3"]


def test_a_place_it_cannot_write_is_still_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="cannot open the agent buffer"):
        DiskBuffer(tmp_path / "a-file" / "buffer.sqlite3")
