"""Billing files read in bounded memory, whatever they hold: every reader of a CSV or JSON
Lines export (the row reader's csv and json modules, Arrow's CSV reader) reads its bytes
through `BoundedReader`, which refuses the file, naming the limit, as soon as

- a physical line runs past `MAX_LINE_BYTES` without a line break (an open quoted cell of
  2 GiB with no newline had the row reader hold it twice over: 4.2 GB for a 2 MB gzip), or
- a gzip expands more than `MAX_RATIO` times its compressed size once past `RATIO_FLOOR`
  (real exports expand 5 to 30 times; 2 GiB of one letter is 1,000 times).

A cell spanning lines is bounded by the csv module's field limit (focus_files) and by
Arrow's block handling; a JSON line by the line limit. Parquet is checked from its metadata
before a row is read (`check_parquet`).
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any

from costguard.billing.errors import BillingImportError

MAX_LINE_BYTES = 8 * 1024 * 1024  # and the csv field limit (characters): no cell is near it
MAX_RATIO = 200
RATIO_FLOOR = 64 * 1024 * 1024  # expanded bytes before the ratio is judged
MAX_PARQUET_COLUMN_CHUNK = 512 * 1024 * 1024  # one column of one row group, uncompressed


class BoundedReader(io.RawIOBase):
    """The bytes of `path` (gunzipped when `gzipped`), checked as they stream."""

    def __init__(self, path: Path, gzipped: bool) -> None:
        super().__init__()
        self.name = path.name
        self._file = path.open("rb")
        self._inner: Any = gzip.GzipFile(fileobj=self._file) if gzipped else self._file
        self._gzipped = gzipped
        self._since_break = 0  # bytes since the last line break
        self._lines = 1
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            n: int = self._inner.readinto(buffer)
        except EOFError:  # click read it as Ctrl-D: the command said only "Aborted."
            raise BillingImportError(
                f"{self.name}: the gzip ends before its end: the download or the copy was "
                "cut short; fetch the file again (nothing of it was imported)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise BillingImportError(f"{self.name}: not a readable gzip ({exc}); fetch the "
                                     "file again (nothing of it was imported)") from None
        if not n:
            return 0
        chunk = memoryview(buffer)[:n].tobytes()
        last = chunk.rfind(b"\n")
        if last < 0:
            self._since_break += n
        else:
            self._lines += chunk.count(b"\n")
            self._since_break = n - last - 1
        if self._since_break > MAX_LINE_BYTES:
            raise BillingImportError(
                f"{self.name}:{self._lines}: a line runs past {MAX_LINE_BYTES >> 20} MiB "
                "without a line break: no export line is that long (refused, nothing read "
                "past it)")
        self._out += n
        if self._gzipped and self._out > RATIO_FLOOR:
            packed = max(self._file.tell(), 1)
            if self._out > MAX_RATIO * packed:
                raise BillingImportError(
                    f"{self.name}: the gzip expands more than {MAX_RATIO} times its size "
                    f"({self._out >> 20} MiB from {packed >> 10} KiB so far): a "
                    "decompression bomb, not an export (refused)")
        return n

    def close(self) -> None:
        try:
            if self._inner is not self._file:
                self._inner.close()
            self._file.close()
        finally:
            super().close()


def open_bounded(path: Path, gzipped: bool) -> io.BufferedReader:
    """`BoundedReader` buffered, for text wrappers and Arrow alike."""
    return io.BufferedReader(BoundedReader(path, gzipped), buffer_size=1 << 20)


def check_parquet(path: Path, metadata: Any) -> None:
    """Refuse a Parquet file any of whose column chunks expands past
    `MAX_PARQUET_COLUMN_CHUNK`, or `MAX_RATIO` times its compressed size past
    `RATIO_FLOOR`, before Arrow reads (and holds) it."""
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            size, packed = chunk.total_uncompressed_size, max(chunk.total_compressed_size, 1)
            if size > MAX_PARQUET_COLUMN_CHUNK or (size > RATIO_FLOOR
                                                   and size > MAX_RATIO * packed):
                raise BillingImportError(
                    f"{path.name}: row group {g}, column {chunk.path_in_schema} expands to "
                    f"{size >> 20} MiB from {packed >> 10} KiB (at most "
                    f"{MAX_PARQUET_COLUMN_CHUNK >> 20} MiB, {MAX_RATIO} times): refused "
                    "before reading it")
