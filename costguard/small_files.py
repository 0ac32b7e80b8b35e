"""Files costguard is configured with (costguard.yaml, policies, the routing file, price
overrides, a token or a secret in a file), read whole under one rule: a regular file of at
most a stated size.

A path naming something else read for ever or waited for ever: `costguard validate
/dev/zero` filled memory to a MemoryError traceback (the size check saw 0 bytes), and a
named pipe or a terminal left the command, or the daemon's cycle, waiting for a writer. Both
are refused as an `OSError` (its `strerror` says why), so every reader's existing "cannot
read" message names them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

SECRET_BYTES = 64 * 2**10  # a token or a password: a JWT is a few KiB


class TooLarge(OSError):
    """The file is over the limit; `size` is what it holds (at least limit + 1)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size:,} bytes, over the {limit:,}-byte limit",
                         str(path))
        self.size = size
        self.limit = limit


def read_small(path: Path, limit: int) -> bytes:
    """The bytes of `path`: a regular file (a symlink to one, as a mounted Secret is) of at
    most `limit` bytes; an OSError otherwise."""
    # non-blocking: opening a named pipe for reading would wait for a writer
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, a pipe or a socket)",
                          str(path))
        if info.st_size > limit:
            raise TooLarge(path, info.st_size, limit)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew since fstat
        raise TooLarge(path, len(data), limit)
    return data


def read_small_text(path: Path, limit: int) -> str:
    """`read_small` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_small(path, limit).decode("utf-8")
