"""`costguard agent replay FILE` reads a trace line by line, each line bounded: /dev/zero
(which never ends a line) filled memory to a MemoryError traceback, and a line nested deep
raised RecursionError past the trace's own errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from costguard.telemetry.trace import MAX_LINE_CHARS, TraceError, read_trace

TRACE = Path(__file__).parents[2] / "costguard" / "telemetry" / "data" / "h100_phases.jsonl"


@pytest.mark.parametrize(("content", "says"), [
    (None, "/dev/zero:1: a line over 65,536 characters: not a trace"),
    ("x" * (MAX_LINE_CHARS + 1) + "\n", ":1: a line over 65,536 characters"),
    ("[" * 5000 + "]" * 5000 + "\n", ":1: not a sample: nested too deep"),
])
def test_a_file_that_is_no_trace_is_refused_bounded(tmp_path: Path, content: str | None,
                                                   says: str) -> None:
    path = Path("/dev/zero")
    if content is not None:
        path = tmp_path / "odd.jsonl"
        path.write_text(content)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert says in str(caught.value)


def test_a_real_recording_still_reads_whole(tmp_path: Path) -> None:
    trace = read_trace(TRACE)
    lines = TRACE.read_text().splitlines()
    assert len(trace.samples) == len(lines) - 1  # less the header
    assert max(map(len, lines)) < MAX_LINE_CHARS // 16
