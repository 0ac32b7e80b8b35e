"""An instance-hour of readings as one compressed block: the stored form of raw minutes
once their hour has settled (`costguard.store.compact`).

A block holds one instance's readings of one hour, up to one per GPU and minute (a reading
is keyed by the minute it begins, as in `gpu_readings`). It is columnar: the readings'
minutes in the hour, spans and sources, their GPU indexes, then each value column
(`VALUE_FIELDS`, the readings table's columns past its key) as a presence mask and the
present values' zig-zag deltas, their bytes shuffled (every value's first byte, then every
second byte...), all of it compressed with zstd (the `zstandard` package: standard frames,
the bytes pyarrow's codec wrote before and reads). A constant column costs a few bytes an
hour, a host's figures (the same in each of its GPUs' readings) little more than once, a
noisy percentage about two bytes a minute.

Integers are kept exactly (up to 2**62, 4 EiB of memory; clamped beyond). Fractional
values are kept on a fixed grid, rounded down (`_SCALE`: 1/100 of a percentage point, of a
watt, of a byte per second or of a second; a millionth of a share): a value and its stored
copy compare the same with any threshold on that grid (`x >= 5.0`, `x < 0.5`); with a
threshold finer than the grid they differ by less than one step of it.
"""

from __future__ import annotations

import math
import struct
import zlib
from array import array
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any, TypeVar

import zstandard

from costguard.model import PERCENT_GRID
from costguard.store.tables import GpuReadingRow

_TABLE = GpuReadingRow.__table__  # type: ignore[attr-defined]
_META = ("provider", "instance_id", "gpu_index", "minute", "source", "span_minutes")
VALUE_FIELDS: tuple[str, ...] = tuple(c.name for c in _TABLE.columns if c.name not in _META)
_FLOATS = frozenset(c.name for c in _TABLE.columns
                    if c.name in VALUE_FIELDS and c.type.python_type is float)
_SCALE: dict[str, int] = {name: (1_000_000 if name == "util_active_share" else PERCENT_GRID)
                          for name in _FLOATS}
_LIMIT = 2**62  # a stored integer's magnitude (zig-zag of a delta stays within 64 bits)
_VERSION = 1
_ZSTD, _ZLIB = 1, 2
_ZSTD_LEVEL = 9
_HEADER = struct.Struct("<BBI")  # format version, codec, raw length
_NONE, _ALL, _MASKED = 0, 1, 2
T = TypeVar("T")

# a source's code in a block is its place here: append new sources, never reorder
SOURCES = ("agent", "cloudwatch", "cloud-monitoring", "sim", "dcgm-exporter")
_CODES = {name: code for code, name in enumerate(SOURCES)}


def source_code(name: str) -> int:
    try:
        return _CODES[str(name)]
    except KeyError:
        raise ValueError(f"a reading from {name!r}, a source blocks have no code for") from None


# a GPU's reading: its GPU index, minute in the hour, span, source code, values
Entry = tuple[int, int, int, int, Sequence[Any]]
_MOST = 60 * 4096  # the readings one block holds: a minute of each of 4,096 GPUs
_LARGEST = 64 * 2**20  # bytes of a block uncompressed (~260 B a reading at most)


def quantize(value: float, scale: int) -> int:
    """The largest grid point (1/`scale`) at or below `value`, as an integer of the grid,
    clamped to what a block holds."""
    q = round(value * scale)
    if q / scale > value:
        q -= 1
    return max(-_LIMIT, min(_LIMIT, q))


def _stored(name: str, value: Any) -> int | None:
    """A column's value as the block's integer (None: absent)."""
    if value is None:
        return None
    scale = _SCALE.get(name)
    if scale is None:
        return max(-_LIMIT, min(_LIMIT, int(value)))
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return _LIMIT if value > 0 else -_LIMIT
    return quantize(value, scale)


def pack_ints(values: Sequence[int]) -> bytes:
    """Zig-zag deltas, as unsigned 64-bit integers with their bytes shuffled."""
    prev = 0
    zz = array("Q")
    for v in values:
        d = v - prev
        prev = v
        zz.append(d << 1 if d >= 0 else ((-d) << 1) - 1)
    raw = zz.tobytes()
    return b"".join(raw[i::8] for i in range(8))


def unpack_ints(data: bytes, count: int) -> list[int]:
    width = count * 8
    plain = bytearray(width)
    for i in range(8):
        plain[i::8] = data[i * count:(i + 1) * count]
    zz = array("Q")
    zz.frombytes(bytes(plain))
    return list(accumulate((z >> 1) ^ -(z & 1) for z in zz))


def encode_columns(columns: Sequence[Sequence[int | None]], rows: int) -> bytes:
    """Integer columns of `rows` entries (None: absent) in the block's column layout."""
    out = bytearray()
    for column in columns:
        present = [v is not None for v in column]
        if not any(present):
            out.append(_NONE)
            continue
        if all(present):
            out.append(_ALL)
        else:
            out.append(_MASKED)
            out += bytes(present)
        values: list[int] = [v for v in column if v is not None]
        out += struct.pack("<I", len(values))
        out += pack_ints(values)
    assert all(len(c) == rows for c in columns)
    return bytes(out)


def decode_columns(data: bytes | memoryview, at: int, names: int, rows: int
                   ) -> tuple[list[list[int | None]], int]:
    """`names` columns of `rows` entries from `data` at offset `at`; and the offset after."""
    view = memoryview(data)
    out: list[list[int | None]] = []
    for _ in range(names):
        tag = view[at]
        at += 1
        if tag == _NONE:
            out.append([None] * rows)
            continue
        mask: list[bool] | None = None
        if tag == _MASKED:
            mask = [bool(b) for b in view[at:at + rows]]
            at += rows
        elif tag != _ALL:
            raise ValueError(f"a reading block's column has tag {tag}")
        (count,) = struct.unpack_from("<I", view, at)
        at += 4
        values = unpack_ints(bytes(view[at:at + 8 * count]), count)
        at += 8 * count
        if mask is None:
            if count != rows:
                raise ValueError("a reading block's full column has the wrong length")
            out.append(list(values))
        else:
            if count != sum(mask):
                raise ValueError("a reading block's column disagrees with its mask")
            it = iter(values)
            out.append([next(it) if on else None for on in mask])
    return out, at


def compress_bytes(raw: bytes, *, small: bool = False) -> bytes:
    """`raw` compressed with zstd, or with zlib where the blob is `small` (an hour of
    history, ~100 bytes a GPU: zlib costs less a call there, for ~2 % more bytes)."""
    if not small:
        return _HEADER.pack(_VERSION, _ZSTD, len(raw)) + zstandard.compress(raw, _ZSTD_LEVEL)
    return _HEADER.pack(_VERSION, _ZLIB, len(raw)) + zlib.compress(raw, 9)


def decompress_bytes(blob: bytes) -> bytes:
    """A blob's bytes; ValueError for anything that is not a block this costguard wrote."""
    try:
        return _decompress(blob)
    except (struct.error, OSError, zlib.error, zstandard.ZstdError, MemoryError,
            OverflowError) as exc:
        raise ValueError(f"a reading block that does not decompress: {exc}") from None


def _decompress(blob: bytes) -> bytes:
    version, codec, size = _HEADER.unpack_from(blob)
    if size > _LARGEST:
        raise ValueError(f"a reading block of {size} bytes, more than any block holds")
    if version != _VERSION:
        raise ValueError(f"a reading block of format {version}; this costguard reads "
                         f"{_VERSION}")
    body = memoryview(blob)[_HEADER.size:]
    if codec == _ZSTD:
        # a frame stating its own length decompresses to that length whatever the limit
        # asked: one that disagrees with the header is refused before it is decompressed
        if zstandard.frame_content_size(body) != size:
            raise ValueError("a reading block's length disagrees with its header")
        frame = zstandard.ZstdDecompressor().decompressobj()
        raw: bytes = frame.decompress(body)  # libzstd stops at the length the frame states
        if not frame.eof or frame.unused_data:  # one frame, and nothing after it
            raise ValueError("a reading block that does not end where its frame does")
    elif codec == _ZLIB:  # at most one byte past the header's length: never more is held
        stream = zlib.decompressobj()
        raw = stream.decompress(body, size + 1)
        if len(raw) == size and not stream.eof:  # cut short (its checksum unread)
            raise ValueError("a reading block that ends before its stream does")
        if stream.unused_data:
            raise ValueError("a reading block that does not end where its stream does")
    else:
        raise ValueError(f"a reading block compressed with codec {codec}")
    if len(raw) != size:
        raise ValueError("a reading block's length disagrees with its header")
    return raw


def encode(entries: Sequence[Entry]) -> bytes:
    """A block of `entries`: one instance's readings of one hour, at most one per GPU and
    minute, sorted by GPU then minute (a host's figures, the same in each of its GPUs'
    readings, then repeat GPU after GPU, which the compression finds)."""
    rows = len(entries)
    if not 0 < rows <= _MOST:
        raise ValueError(f"a reading block holds 1 to {_MOST} readings, not {rows}")
    head = bytearray(struct.pack("<I", rows))
    head += bytes(e[1] for e in entries)
    head += bytes(e[2] for e in entries)
    head += bytes(e[3] for e in entries)
    columns: list[list[int | None]] = [[e[0] for e in entries]]
    columns += [[_stored(name, e[4][i]) for e in entries]
                for i, name in enumerate(VALUE_FIELDS)]
    return compress_bytes(bytes(head) + encode_columns(columns, rows))


def decoded(blob: bytes, parse: Callable[[bytes], T], what: str) -> T:
    """`parse` of a blob's bytes; ValueError (naming `what`) for a blob cut short or
    garbled, whatever the parser tripped on."""
    try:
        return parse(decompress_bytes(blob))
    except (struct.error, IndexError, TypeError) as exc:
        raise ValueError(f"{what} cut short or garbled: {exc}") from None


def decode(blob: bytes) -> list[Entry]:
    """The entries of a block, their values in `VALUE_FIELDS` order (floats back on their
    grid, integers exact); ValueError for a blob that is not a whole block."""
    return decoded(blob, _decode, "a reading block")


def _decode(raw: bytes) -> list[Entry]:
    (rows,) = struct.unpack_from("<I", raw)
    at = 4
    offsets, spans, sources = (raw[at + k * rows:at + (k + 1) * rows] for k in range(3))
    columns, end = decode_columns(raw, at + 3 * rows, 1 + len(VALUE_FIELDS), rows)
    if end != len(raw) or len(sources) != rows:
        raise ValueError("a reading block's length disagrees with its columns")
    gpus = columns[0]
    restored: list[list[Any]] = []
    for name, column in zip(VALUE_FIELDS, columns[1:], strict=True):
        scale = _SCALE.get(name)
        restored.append(column if scale is None
                        else [None if v is None else v / scale for v in column])
    values = list(zip(*restored, strict=True))
    return [(int(gpus[i] or 0), offsets[i], spans[i], sources[i], values[i])
            for i in range(rows)]


def present_sources(entries: Sequence[Entry]) -> int:
    """The bit mask of the sources (their codes) among `entries`."""
    mask = 0
    for code in {e[3] for e in entries}:
        mask |= 1 << code
    return mask

