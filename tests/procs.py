"""Helpers for tests that start costguard (or pytest) as a child process."""

from __future__ import annotations

import signal


def sigint_as_default() -> None:
    """`preexec_fn` for a child a test interrupts with SIGINT. A shell's background job
    (`make test &`) ignores SIGINT, every child inherits that, and a Python started with
    SIGINT ignored never raises KeyboardInterrupt: the test would wait out its timeout."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
