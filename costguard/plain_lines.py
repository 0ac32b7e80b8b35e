"""Consoles whose lines end where their text does, and that show no terminal controls.

Rich pads a centred table title to the width and keeps the space where it broke a line:
unseen on a terminal, but a report written to a file or piped into a log carried a trailing
space on most lines (164 of the demo's), which `git diff --check` flags and every diff of
two reports shows. Where the output is not a terminal, `TrimmedLines` leaves each whole
line's trailing spaces out; a terminal gets rich's output as it is.

What costguard prints is partly written by others: a tag, a pod's annotation (a JupyterHub
user name), a billed line's tags, an instance's name. An escape character in one (`ESC [2J`,
`ESC ]0;title BEL`) would reach the terminal as a command: clearing it, retitling it,
rewriting what is on screen (kubectl's CVE-2021-25743). `ShownConsole` leaves every control
character but a line break and a tab out of the text it prints (rich itself dropped only
five of them), while its own styles still reach the terminal; `shown` does the same to a
line printed without rich.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from costguard.controls import TERMINAL_CONTROLS

_TRAILING = re.compile(r"[ \t]+(?=\n)")
# all zero-width to rich: leaving them out moves no column of a table
_UNSHOWN = TERMINAL_CONTROLS


def shown(text: str) -> str:
    """`text` without the characters a terminal would take as commands."""
    return _UNSHOWN.sub("", text)


def print_data(text: str, end: str = "\n") -> None:
    """Print CSV or JSON on stdout: as it is into a pipe or a file, `shown` on a terminal
    (as `ls` prints a file name)."""
    out = sys.stdout
    out.write((shown(text) if out.isatty() else text) + end)


class ShownConsole(Console):
    """A rich console whose printed text holds no terminal control characters."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None
               ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            # a segment marked `control` is rich's own (cursor moves); the styles' codes
            # are added after rendering, so a text segment holds only what was printed
            if segment.control is None and _UNSHOWN.search(segment.text):
                segment = Segment(shown(segment.text), segment.style)
            yield segment


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
    return ShownConsole(file=TrimmedLines(lambda: sys.stdout),  # type: ignore[arg-type]
                        **options)


def file_console(fh: TextIO, **options: Any) -> Console:
    """A console writing into the open file `fh`, its lines without trailing spaces."""
    return ShownConsole(file=TrimmedLines(lambda: fh), **options)  # type: ignore[arg-type]
