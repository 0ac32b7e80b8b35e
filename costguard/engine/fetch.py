"""A provider's GPU metrics asked a chunk at a time: whole scopes per call, a large scope's
span in slices, each call's readings stored as it comes back, a few calls in flight at once
(engine/cycle.py's telemetry stage; `engine.backfill` decides which spans)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta

from costguard.alerts.gaps import METRICS_SCOPE
from costguard.engine import behind
from costguard.engine.backfill import Fetch, Observe
from costguard.errors import ProviderError
from costguard.model import Gap, GpuMinute, Instance
from costguard.providers.base import (
    LeavesOutRepeats,
    Provider,
    Readings,
    ReadsWindowOnce,
    Split,
)

# instance-minutes a provider's metrics calls in flight ask for at once: 5,000 instances
# over a steady cycle's quarter hour, 1,250 over a first cycle's hour; what a call brings
# back grows with its span and is held until it is stored (`fetcher`), so providers read
# at once share it
TELEMETRY_CHUNK = 75_000
# calls in flight at once, each a share of `TELEMETRY_CHUNK`, for a provider whose calls may
# overlap (`costguard.providers.base.Readings`). One at a time, each call waited for its
# slowest scope (a throttled call's backoff: 0.5 s on average) and its answer was stored
# before the next call was asked: at 100,000 instances that was a third of the first
# cycle's telemetry stage. A chunk of scopes larger than a share asks for more; as many as
# the budget holds are in flight, up to twice this many.
IN_FLIGHT = 3
# instances in flight: a long catch-up still asks ten scopes of 50 at once (a call of several
# in flight, its share)
TELEMETRY_CHUNK_MIN = 500
TELEMETRY_SLICE_MIN = timedelta(minutes=15)  # a larger scope's span is cut no finer


def _minutes(start: datetime, end: datetime) -> int:
    return max(1, math.ceil((end - start) / timedelta(minutes=1)))


def _per_call(readers: int, in_flight: int) -> int:
    """Instance-minutes one call may ask for: `TELEMETRY_CHUNK` shared by the `readers`
    providers read at once and the `in_flight` calls of each."""
    return TELEMETRY_CHUNK // (max(1, readers) * max(1, in_flight))


def chunk_size(start: datetime, end: datetime, readers: int = 1, in_flight: int = 1) -> int:
    """Instances per provider metrics call over [start, end) when `readers` providers are
    read at once, `in_flight` calls each: their share of `TELEMETRY_CHUNK`
    instance-minutes, at least their share of `TELEMETRY_CHUNK_MIN` instances.

    Where calls overlap (`in_flight` > 1: AWS and Compute Engine, whose every scope is calls
    of its own whatever chunk it is in), that least share is capped at what one call asks
    without its span cut (`time_slices`): past it, every scope of the chunk was asked once
    a slice, twice the calls after a 6-hour downtime, to bring the same readings."""
    minutes = _minutes(start, end)
    least = TELEMETRY_CHUNK_MIN // max(1, in_flight)
    if in_flight > 1:
        least = min(least, max(1, _per_call(readers, 1) // minutes))
    return max(least, _per_call(readers, in_flight) // minutes)


def time_slices(start: datetime, end: datetime, instances: int, readers: int = 1
                ) -> list[tuple[datetime, datetime]]:
    """[start, end) cut so that one call over `instances` brings back at most
    `TELEMETRY_CHUNK` instance-minutes (shared by `readers`), in slices of no less than
    `TELEMETRY_SLICE_MIN`. A chunk keeps its scopes whole, so a scope larger than
    `chunk_size` is a call of its own: read over the hours of a downtime in one call, a
    10,000-instance scope's answer held at once took 5 GB. Such a call may ask for more
    than a call's share of the budget (not cut finer: a scope's every slice is a call),
    and waits until what is in flight beside it leaves room (`fetcher`)."""
    budget = _per_call(readers, 1)
    step = max(TELEMETRY_SLICE_MIN, timedelta(minutes=budget // max(1, instances)))
    if end - start <= step:
        return [(start, end)]
    cuts = [start + k * step for k in range(math.ceil((end - start) / step))]
    return list(zip(cuts, [*cuts[1:], end], strict=True))


class _InFlight:
    """The instance-minutes of the calls in flight, at most `cap`: a call that would pass it
    waits, and one larger than `cap` alone (a huge scope's slice) runs by itself."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._used = 0
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, weight: int) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: self._used == 0 or self._used + weight <= self.cap)
            self._used += weight
        try:
            yield
        finally:
            with self._changed:
                self._used -= weight
                self._changed.notify_all()


def fetcher(name: str, provider: Provider, sink: Callable[[Sequence[GpuMinute], datetime], None],
            readers: int) -> Fetch:
    """Ask the provider `chunk_size` instances at a time (`readers`: the providers read at
    once; a scope never split), each call about a share of the budget, as many calls at once
    as the budget holds (`IN_FLIGHT` full shares; up to twice as many smaller calls) where
    its calls may overlap, and
    hand each call's readings to `sink` (and `observe`) as it comes back, one call at a
    time, before the call counts as done: at organisation scale an hour of readings for
    every GPU held at once was gigabytes, so what the calls in flight ask for is bounded
    (`TELEMETRY_CHUNK`). A chunk whose call raises is a gap for its scopes while the others
    are read; when every chunk raises, the first error is raised, as one call would. Once a
    call's readings are stored, a provider that can leave out unchanged repeats is told so
    (`LeavesOutRepeats`): the next cycle's settling span then brings only what changed."""
    overlap = getattr(provider, "overlapping_metrics", False) is True
    in_flight = IN_FLIGHT if overlap else 1
    budget = _InFlight(_per_call(readers, 1))
    handover = threading.Lock()  # stored, observed and confirmed one call at a time

    def ask(chunk: list[Instance], start: datetime, end: datetime, sink_since: datetime,
            observe: Observe | None, split: Split | None) -> list[Gap]:
        """One call; its readings stored; the scopes it could not read while the others
        answered."""
        with budget.hold(len(chunk) * _minutes(start, end)):
            if split is None:
                readings = provider.gpu_metrics(chunk, start, end)
            else:
                assert isinstance(provider, ReadsWindowOnce)
                readings = provider.gpu_metrics_split(chunk, start, end, *split)
            missing = (readings.gaps if isinstance(readings, Readings)
                       else getattr(provider, "metric_gaps", []))
            gaps = [Gap(provider=name, scope=g.scope + METRICS_SCOPE, error=g.error)
                    for g in missing]
            with handover:
                sink(readings, sink_since)
                if observe is not None:
                    observe(readings)
                if isinstance(provider, LeavesOutRepeats):  # stored: unchanged copies may go
                    provider.readings_stored(readings)
        return gaps

    def fetch(wanted: list[Instance], start: datetime, end: datetime,
              observe: Observe | None, split: Split | None = None) -> list[Gap]:
        failed: list[ProviderError] = []
        chunks = behind.scope_chunks(wanted, chunk_size(start, end, readers, in_flight))

        def read(chunk: list[Instance]) -> list[Gap]:
            # a scope larger than a chunk is asked a slice of the span at a time (the single
            # read of a provider that reads whole scopes excepted)
            slices = ([(start, end)] if split is not None
                      else time_slices(start, end, len(chunk), readers))
            gaps: list[Gap] = []
            try:
                for lo, hi in slices:
                    gaps += ask(chunk, lo, hi, start, observe, split)
            except ProviderError as exc:  # the chunk's later slices are not asked
                failed.append(exc)
                gaps += [Gap(provider=name, scope=scope + METRICS_SCOPE, error=str(exc))
                         for scope in sorted({behind.scope_keys(i)[0] for i in chunk})]
            return gaps

        if in_flight == 1 or len(chunks) == 1:
            per_chunk = [read(chunk) for chunk in chunks]
        else:
            # an error (the store's) cancels the chunks not yet asked (`Executor.map`)
            with ThreadPoolExecutor(min(2 * in_flight, len(chunks)), f"costguard-{name}-fetch"
                                    ) as pool:
                per_chunk = list(pool.map(read, chunks))
        if failed and len(failed) == len(chunks):
            raise failed[0]
        return [gap for gaps in per_chunk for gap in gaps]

    return fetch
