"""The content digests of a bill's lines, worked out in a second process while the first
imports: hashing each line is Python work a thread cannot share (hashlib holds the GIL for
inputs this short), and it was a third of what the column reader did. Files of fewer than
HELPER_MIN_LINES lines (about) are hashed in the importing process.

The helper process reads the same file in the same batches (focus_batches is
deterministic for the same block and batch sizes, which it is given) and sends each
batch's digests, 8 bytes a line, in order; each batch's first and last digest are checked
here. If the helper fails or is out of step, the importing process hashes the rest itself:
the digests are the same either way (`digests_of`).
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from costguard.billing.arrow_text import contents

# files of fewer lines are hashed in the importing process (the helper starts in ~0.5 s)
HELPER_MIN_LINES = 150_000
_CSV_LINE_BYTES = 200  # about, in a FOCUS export (gzip: about a tenth of that)
_DIGEST = 8
_LENGTH = struct.Struct("<Q")


def digests_of(table: Any) -> list[bytes]:
    """Each row's 8-byte BLAKE2b digest of its text (arrow_text.contents)."""
    blake2b = hashlib.blake2b
    return [blake2b(data, digest_size=_DIGEST).digest() for data in contents(table)]


class Digests:
    """Each batch's digests, from the helper process (`python -m
    costguard.billing.line_digests`) while it keeps up, else worked out here."""

    def __init__(self, path: Path, kind: str, width: int, names: list[str],
                 sizes: tuple[int, int]) -> None:
        self.helper: subprocess.Popen[bytes] | None = None
        if _lines_about(path, kind) >= HELPER_MIN_LINES:
            spec = json.dumps({"path": str(path), "kind": kind, "width": width,
                               "names": names, "sizes": sizes})
            self.helper = subprocess.Popen(
                [sys.executable, "-m", "costguard.billing.line_digests", spec],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def of(self, table: Any) -> bytes:
        """The digests of `table`, the next batch, one after the other (8 bytes a line)."""
        if self.helper is not None and self.helper.stdout is not None:
            blob = _read(self.helper.stdout)
            n = table.num_rows
            if len(blob) == n * _DIGEST and (n == 0 or _checked(table, blob)):
                return blob
            self.close()  # out of step, or stopped: the rest are worked out here
        return b"".join(digests_of(table))

    def close(self) -> None:
        if self.helper is not None:
            self.helper.kill()
            self.helper.wait()
            if self.helper.stdout is not None:
                self.helper.stdout.close()
            self.helper = None

    def __enter__(self) -> Digests:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _lines_about(path: Path, kind: str) -> int:
    """About how many lines the file has: Parquet says; CSV by its size."""
    if kind == "parquet":
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

        return int(pq.ParquetFile(path).metadata.num_rows)
    size = path.stat().st_size
    return size * 10 // _CSV_LINE_BYTES if kind.endswith(".gz") else size // _CSV_LINE_BYTES


def _checked(table: Any, blob: bytes) -> bool:
    """Whether the helper's digests of the batch's first and last line are this one's."""
    last = table.num_rows - 1
    ends = digests_of(table.take([0, last]))
    return blob[:_DIGEST] == ends[0] and blob[last * _DIGEST:] == ends[1]


def _read(stream: IO[bytes]) -> bytes:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return b""
    (size,) = _LENGTH.unpack(head)
    return stream.read(size)


def main(spec: str) -> None:
    """The helper: each batch's digests, as a length and the digests, on stdout."""
    from costguard.billing.focus_batches import tables

    args = json.loads(spec)
    out = sys.stdout.buffer
    for table in tables(Path(args["path"]), args["kind"], args["width"],
                         tuple(args["sizes"])):
        blob = b"".join(digests_of(table.rename_columns(args["names"])))
        out.write(_LENGTH.pack(len(blob)) + blob)
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1])
