"""Readings kept compactly: an instance-hour's block holds its readings (integers exact,
fractions on their grid, rounded down), garbage never decodes into readings, and the hourly
history adds them up exactly."""

from __future__ import annotations

import contextlib
import math
import struct
import subprocess
import sys
import tracemalloc
import zlib

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.model import TelemetrySource
from costguard.store import blocks, hours

_FRACTIONS = {"util_active_share": 1_000_000}
_INTS = {"samples", "mem_used_bytes", "mem_total_bytes", "process_count", "top_process_pid",
         "top_process_bytes", "host_cpus", "host_hot_cores", "host_mem_used_bytes",
         "host_mem_total_bytes", "host_sessions", "kernels_busy"}


def _value(name: str) -> st.SearchStrategy[object]:
    if name in _INTS:
        return st.none() | st.integers(0, 2**62)
    top = 1.0 if name in _FRACTIONS else 1e6
    return st.none() | st.floats(0, top, allow_nan=False)


_ENTRY_VALUES = st.tuples(*(_value(n) for n in blocks.VALUE_FIELDS))


@st.composite
def block_entries(draw: st.DrawFn) -> list[blocks.Entry]:
    keys = draw(st.sets(st.tuples(st.integers(0, 9), st.integers(0, 59)), min_size=1,
                        max_size=80))
    return [(gpu, minute, draw(st.integers(1, 60)),
             draw(st.integers(0, len(blocks.SOURCES) - 1)), draw(_ENTRY_VALUES))
            for gpu, minute in sorted(keys)]


def _grid(name: str, value: object) -> object:
    if value is None or name in _INTS:
        return value
    assert isinstance(value, float)
    scale = _FRACTIONS.get(name, 100)
    return math.floor(value * scale + 1e-6) / scale


@settings(max_examples=60, deadline=None)
@given(block_entries())
def test_a_block_gives_back_what_it_was_given(entries: list[blocks.Entry]) -> None:
    back = blocks.decode(blocks.encode(entries))
    assert [e[:4] for e in back] == [e[:4] for e in entries]
    for (*_, want), (*_, got) in zip(entries, back, strict=True):
        for name, w, g in zip(blocks.VALUE_FIELDS, want, got, strict=True):
            if w is None or name in _INTS:
                assert g == w, name
            else:  # on the grid, at or below, less than one step away
                assert isinstance(w, float) and isinstance(g, float)
                step = 1 / _FRACTIONS.get(name, 100)
                assert g <= w < g + step + 1e-9, (name, w, g)


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 100, allow_nan=False), st.integers(0, 10_000))
def test_a_stored_value_meets_every_threshold_on_the_grid_as_the_value_did(
        value: float, hundredths: int) -> None:
    threshold = hundredths / 100
    stored = blocks.quantize(value, 100) / 100
    assert (stored >= threshold) == (value >= threshold)
    assert (stored < threshold) == (value < threshold)


def test_two_decimal_values_are_kept_exactly() -> None:
    values = [None] * len(blocks.VALUE_FIELDS)
    at = blocks.VALUE_FIELDS.index("util_mean")
    for v in (0.57, 33.33, 4.99, 5.0, 99.99, 0.01, 100.0):
        values[at] = v
        (back,) = blocks.decode(blocks.encode([(0, 0, 1, 0, tuple(values))]))
        assert back[4][at] == v


def test_every_telemetry_source_has_a_code_and_codes_never_move() -> None:
    assert set(blocks.SOURCES) >= {str(s) for s in TelemetrySource}
    # stored blocks depend on these places: append only
    assert blocks.SOURCES[:5] == ("agent", "cloudwatch", "cloud-monitoring", "sim",
                                  "dcgm-exporter")


def test_out_of_range_values_are_clamped_never_an_error() -> None:
    values = [None] * len(blocks.VALUE_FIELDS)
    values[blocks.VALUE_FIELDS.index("power_w_mean")] = math.inf
    values[blocks.VALUE_FIELDS.index("host_disk_bps")] = 1e300
    values[blocks.VALUE_FIELDS.index("util_mean")] = math.nan
    values[blocks.VALUE_FIELDS.index("mem_used_bytes")] = 2**63 - 1  # what the model allows
    (back,) = blocks.decode(blocks.encode([(0, 0, 1, 0, tuple(values))]))
    assert back[4][blocks.VALUE_FIELDS.index("power_w_mean")] == 2**62 / 100
    assert back[4][blocks.VALUE_FIELDS.index("mem_used_bytes")] == 2**62  # 4 EiB
    assert back[4][blocks.VALUE_FIELDS.index("util_mean")] is None


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_is_a_value_error_never_a_crash(junk: bytes) -> None:
    for decode in (blocks.decode, hours.decode):
        with contextlib.suppress(ValueError):
            decode(junk)


@settings(max_examples=40, deadline=None)
@given(block_entries(), st.data())
def test_a_block_cut_short_or_bit_flipped_is_refused(entries: list[blocks.Entry],
                                                     data: st.DataObject) -> None:
    blob = blocks.encode(entries)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ValueError):
        blocks.decode(blob[:cut])
    # a block whose header claims more than any block holds is refused before decompressing
    huge = struct.pack("<BBI", 1, 2, 2**31) + zlib.compress(b"\0" * 100)
    with pytest.raises(ValueError, match="more than any block holds"):
        blocks.decode(huge)



def test_a_block_pyarrow_compressed_reads_the_same() -> None:
    """Stores written before the codec moved to `zstandard` hold pyarrow's zstd frames:
    both write standard frames, so those blocks read as they did."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    entries: list[blocks.Entry] = [(g, m, 1, 0, _reading(util_mean=float(m), samples=60))
                                   for g in range(4) for m in range(60)]
    blob = blocks.encode(entries)
    raw = blocks.decompress_bytes(blob)
    old = (struct.pack("<BBI", 1, 1, len(raw))
           + pa.Codec("zstd", compression_level=9).compress(raw, asbytes=True))
    assert blob[:6] == old[:6]  # version 1, zstd, the same length
    assert blocks.decode(old) == blocks.decode(blob)



def test_settling_readings_does_not_load_pyarrow() -> None:
    """The daemon settles readings every hour: a block's codec is ~1 MB of the daemon's
    resident memory; pyarrow's (what blocks used before) was ~31 MB, held from the first
    prune on."""
    probe = ("import sys\n"
             "from costguard.store import blocks, compact, hours\n"
             "blob = blocks.encode([(0, m, 1, 0, (None,) * len(blocks.VALUE_FIELDS))"
             " for m in range(60)])\n"
             "assert len(blocks.decode(blob)) == 60\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyarrow'))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"

def test_a_block_longer_than_its_header_says_is_refused_before_it_is_decompressed(
        ) -> None:
    # a frame stating 256 MiB behind a header of 100 bytes: decompressed, the frame's own
    # length would win over any limit asked; a zlib stream as long (a history blob's codec)
    # is read no further than the header's length
    for bomb in (struct.pack("<BBI", 1, 1, 100) + zstandard.compress(b"\0" * 2**28, 1),
                 struct.pack("<BBI", 1, 2, 100) + zlib.compress(b"\0" * 2**28, 1)):
        tracemalloc.start()
        try:
            with pytest.raises(ValueError, match="disagrees with its header"):
                blocks.decode(bomb)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2**22  # the stream itself is ~0.3 MB; decompressed, 256 MiB

def test_a_block_with_bytes_after_its_stream_is_refused() -> None:
    whole = blocks.encode([(0, m, 1, 0, _reading(util_mean=50.0))
                           for m in range(60)])
    history = blocks.compress_bytes(b"an hour of history", small=True)
    assert blocks.decompress_bytes(history) == b"an hour of history"
    for blob in (whole, history):
        with pytest.raises(ValueError, match="does not end where its"):
            blocks.decompress_bytes(blob + b"\0junk")


def test_a_frame_that_understates_its_length_is_refused_as_it_is_decompressed() -> None:
    # the frame's own length field forged to match a 100-byte header: libzstd stops at it
    frame = bytearray(zstandard.compress(b"\0" * 2**28, 1))
    assert frame[4] == 0b10000000  # a 4-byte length field after the frame's header byte
    frame[6:10] = struct.pack("<I", 100)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="does not decompress"):
            blocks.decode(struct.pack("<BBI", 1, 1, 100) + bytes(frame))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**22


def _reading(**values: object) -> tuple[object, ...]:
    return tuple(values.get(n) for n in blocks.VALUE_FIELDS)


def test_the_hourly_history_adds_an_hours_readings_up_exactly() -> None:
    entries: list[blocks.Entry] = [
        # GPU 0: two agent minutes and a 5-minute cloud reading
        (0, 0, 1, 0, _reading(util_mean=10.0, util_max=40.0, sm_mean=3.5, sm_max=9.0,
                              mem_used_bytes=7 * 2**30, mem_total_bytes=80 * 2**30,
                              host_cpu_pct=50.0, host_cpus=96, process_count=2)),
        (0, 1, 1, 0, _reading(util_mean=20.0, util_p95=30.0, sm_mean=0.5,
                              mem_used_bytes=9 * 2**30, host_cpu_pct=97.5, host_cpus=96)),
        (0, 10, 5, 1, _reading(util_mean=1.0, util_max=2.0)),
        # GPU 3: nothing but memory
        (3, 0, 1, 0, _reading(mem_used_bytes=1)),
    ]
    gpu0, gpu3 = hours.summarize(entries)
    assert gpu0.gpu_index == 0 and gpu3.gpu_index == 3
    assert gpu0.stats["minutes"] == 7 and gpu0.stats["sources"] == 0b11
    # utilization: 7 minutes (1 + 1 + 5), mean (10 + 20 + 5 * 1) / 7, peak 40
    assert gpu0.stats["util_minutes"] == 7
    assert gpu0.mean("util") == (10 + 20 + 5) / 7
    assert gpu0.value("util_peak") == 40.0
    # SM activity: 2 minutes; the second minute's peak is its mean (no max, no p95)
    assert gpu0.stats["sm_minutes"] == 2 and gpu0.mean("sm") == 2.0
    assert gpu0.value("sm_peak") == 9.0
    assert gpu0.hists["sm_peak"][hours.bucket(9.0)] == 1
    assert gpu0.hists["sm_peak"][hours.bucket(0.5)] == 1
    # the 5-minute reading counts 5 minutes in bucket [1, 2) of means and [2, 3) of peaks
    assert gpu0.hists["util_mean"] == _hist({1.0: 5, 10.0: 1, 20.0: 1})
    assert gpu0.hists["util_peak"] == _hist({2.0: 5, 40.0: 1, 30.0: 1})
    assert gpu0.value("vram_peak") == 9 * 2**30 and gpu0.value("vram_total") == 80 * 2**30
    assert gpu0.mean("cpu") == 73.75 and gpu0.value("cpu_peak") == 97.5
    assert gpu0.hists["host_cpu"] == _hist({50.0: 1, 97.5: 1})
    assert gpu0.value("host_cpus") == 96 and gpu0.value("procs_peak") == 2
    assert gpu0.mean("power") is None and gpu0.value("power_peak") is None
    assert gpu3.stats["sm_minutes"] == 0 and gpu3.mean("sm") is None
    assert gpu3.value("vram_peak") == 1
    back = hours.decode(hours.encode([gpu0, gpu3]))
    assert [(h.gpu_index, h.stats, h.hists) for h in back] == [
        (h.gpu_index, h.stats, h.hists) for h in (gpu0, gpu3)]


def _hist(counts: dict[float, int]) -> list[int]:
    out = [0] * hours.BUCKETS
    for value, n in counts.items():
        out[hours.bucket(value)] += n
    return out


def test_history_buckets_are_a_point_wide_below_five_percent_and_five_above() -> None:
    assert hours.EDGES[:6] == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert hours.EDGES[-1] == 95.0 and hours.BUCKETS == 24
    assert hours.bucket(0.0) == 0 and hours.bucket(4.99) == 4 and hours.bucket(5.0) == 5
    assert hours.bucket(100.0) == 23 and hours.bucket(-1.0) == 0
