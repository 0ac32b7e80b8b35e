"""Count AWS API calls by operation in any process that uses botocore, costguard's or not.

Every botocore client call goes through `BaseClient._make_api_call` once (retries happen
below it), so wrapping it counts calls the same way for costguard and for Cloud Custodian.

As a script, it runs Cloud Custodian with the counter installed and writes the counts::

    /tmp/peer-c7n/venv/bin/python bench/_api_calls.py COUNTS.json run -r us-east-1 ... pol.yml

It imports nothing from costguard, so it runs in the peer's own virtualenv.
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any


def install() -> Counter[str]:
    """Patch botocore to count calls as `Service.Operation`; returns the live counter."""
    from botocore.client import BaseClient

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    original = BaseClient._make_api_call  # type: ignore[attr-defined]

    def counting(self: Any, operation_name: str, api_params: Any) -> Any:
        service = self.meta.service_model.service_id.replace(" ", "")
        with lock:
            counts[f"{service}.{operation_name}"] += 1
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counting  # type: ignore[attr-defined]
    return counts


class CallCpu:
    """CPU the calling threads spend inside cloud client calls, by label: what a call costs
    its client (building, signing and sending the request, receiving and parsing the answer,
    the parse hooks costguard registers included; a retry's sleep costs none). A call made
    inside another timed one (a credentials refresh) counts in the outer one only; work of
    threads a library runs of its own (gRPC's core) is not seen."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self._inside = threading.local()
        self._lock = threading.Lock()

    def patch(self, owner: Any, name: str, label: str) -> None:
        """Time every call of `owner.name` (a class's method) as `label`."""
        setattr(owner, name, self._timed(getattr(owner, name), label))

    def _timed(self, func: Callable[..., Any], label: str) -> Callable[..., Any]:
        inside, lock, seconds = self._inside, self._lock, self.seconds

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "on", False):
                return func(*args, **kwargs)
            inside.on = True
            started = time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                inside.on = False
                with lock:
                    seconds[label] += spent

        return timed


def _run_custodian(out_path: str, argv: list[str]) -> int:
    counts = install()
    def write() -> None:
        with open(out_path, "w") as out:
            json.dump(dict(counts), out, indent=1)

    atexit.register(write)
    from c7n.cli import main  # type: ignore[import-not-found]  # only in the peer's venv

    sys.argv = ["custodian", *argv]
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(_run_custodian(sys.argv[1], sys.argv[2:]))
