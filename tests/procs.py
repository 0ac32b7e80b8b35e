"""Helpers for tests that start costguard (or pytest) as a child process."""

from __future__ import annotations

import sys

# `python -m MODULE ARGS...` with SIGINT raising KeyboardInterrupt, set by the child itself
_RUN_WITH_SIGINT = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "module = sys.argv.pop(1); sys.argv[0] = module; "
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_m_interruptible(module: str, *args: str) -> list[str]:
    """The argv of `python -m module args...` for a child a test interrupts with SIGINT.

    A shell's background job (`make test &`) ignores SIGINT, every child inherits that, and
    a Python started with SIGINT ignored never raises KeyboardInterrupt: the test would wait
    out its timeout. The child sets the handler itself, first thing. (A `preexec_fn` did it
    before; that makes the parent fork rather than spawn, so a test process that has loaded
    gRPC, as the GCP tests do, runs gRPC's fork handlers in the child: in one CI run the
    child exited at once, its only output a gRPC epoll error.)"""
    return [sys.executable, "-c", _RUN_WITH_SIGINT, module, *args]
