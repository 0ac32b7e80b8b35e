"""Consoles whose lines end where their text does.

Rich pads a centred table title to the width and keeps the space where it broke a line:
unseen on a terminal, but a report written to a file or piped into a log carried a trailing
space on most lines (164 of the demo's), which `git diff --check` flags and every diff of
two reports shows. Where the output is not a terminal, `TrimmedLines` leaves each whole
line's trailing spaces out; a terminal gets rich's output as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console

_TRAILING = re.compile(r"[ \t]+(?=\n)")


class TrimmedLines:
    """A text stream over `target()` (asked at each write: sys.stdout as a test or a
    redirect set it) that, when the target is not a terminal, writes each line without its
    trailing spaces. The start of a line not yet ended waits for its end, or for `flush`
    (a prompt), which writes it as it is."""

    def __init__(self, target: Callable[[], TextIO]) -> None:
        self._target = target
        self._line = ""

    def isatty(self) -> bool:
        return self._target().isatty()

    @property
    def encoding(self) -> str:  # rich picks its box characters by it
        return getattr(self._target(), "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self._target().fileno()

    def write(self, text: str) -> int:
        target = self._target()
        if target.isatty():
            return target.write(text)
        whole, newline, self._line = (self._line + text).rpartition("\n")
        if newline:
            target.write(_TRAILING.sub("", whole + newline))
        return len(text)

    def flush(self) -> None:
        target = self._target()
        if self._line:
            target.write(self._line)
            self._line = ""
        target.flush()


def stdout_console(**options: Any) -> Console:
    """A console on stdout whose lines, piped or redirected, carry no trailing spaces."""
    return Console(file=TrimmedLines(lambda: sys.stdout), **options)  # type: ignore[arg-type]


def file_console(fh: TextIO, **options: Any) -> Console:
    """A console writing into the open file `fh`, its lines without trailing spaces."""
    return Console(file=TrimmedLines(lambda: fh), **options)  # type: ignore[arg-type]
