"""Files costguard is configured with (costguard.yaml, policies, the routing file, price
overrides, a token or a secret in a file), read whole under one rule: a regular file or a
pipe, of at most a stated size.

A device read for ever or waited for ever: `costguard validate /dev/zero` filled memory
to a MemoryError traceback (the size check saw 0 bytes), and `/dev/stdin` on a terminal
waited for typing. A device or a socket is refused as an `OSError` (its `strerror` says
why), so every reader's existing "cannot read" message names it. A pipe is read, bounded:
`costguard validate <(helm template ...)` names one, and a named pipe that nothing writes
reads as empty at once, instead of waiting for a writer.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

SECRET_BYTES = 64 * 2**10  # a token or a password: a JWT is a few KiB


class TooLarge(OSError):
    """The file is over the limit: `said` is its size, or for a pipe, that it is over."""

    def __init__(self, path: Path, size: int | None, limit: int) -> None:
        self.said = f"{size:,} bytes" if size is not None else f"over {limit:,} bytes"
        super().__init__(errno.EFBIG, f"{self.said}, over the {limit:,}-byte limit",
                         str(path))
        self.limit = limit


def read_small(path: Path, limit: int) -> bytes:
    """The bytes of `path`: a regular file (a symlink to one, as a mounted Secret is) or a
    pipe, of at most `limit` bytes; an OSError otherwise."""
    # non-blocking: opening a named pipe for reading would wait for a writer
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
            raise OSError(errno.EINVAL, "not a file or a pipe (a device or a socket)",
                          str(path))
        if info.st_size > limit:
            raise TooLarge(path, info.st_size, limit)
        os.set_blocking(fd, True)  # a pipe's writer may not have written yet
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # a pipe's size is not known; a file may have grown since fstat
        raise TooLarge(path, None, limit)
    return data


def read_small_text(path: Path, limit: int) -> str:
    """`read_small` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_small(path, limit).decode("utf-8")
