"""What the daemon's logging writes while a test's block runs: its own handler and format
(`configure_logging`, throttles included), to a string."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from costguard.daemon.logs import Throttle, configure_logging


@contextmanager
def daemon_log(*throttled: str) -> Iterator[io.StringIO]:
    """The daemon's log lines while the block runs. The throttles of the `throttled`
    loggers are forgotten first: another test's lines in the last minute would count."""
    for name in throttled:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, Throttle)]:
            logger.removeFilter(old)
    out = io.StringIO()
    handler = configure_logging(stream=out)
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)
