"""A provider's GPU metrics asked a chunk at a time: whole scopes per call, a large scope's
span in slices, each call's readings stored before the next (engine/cycle.py's telemetry
stage; `engine.backfill` decides which spans)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta

from costguard.engine import behind
from costguard.engine.backfill import Fetch, Observe, Split
from costguard.engine.collect import METRICS_SCOPE
from costguard.errors import ProviderError
from costguard.model import Gap, GpuMinute, Instance
from costguard.providers.base import LeavesOutRepeats, Provider, ReadsWholeScopes

# instance-minutes per provider metrics call (scopes kept whole): 5,000 instances over a
# steady cycle's quarter hour, 1,250 over a first cycle's hour; what one call brings back
# grows with its span, and a chunk's answers are held at once (`fetcher`), so providers
# read at once share it
TELEMETRY_CHUNK = 75_000
TELEMETRY_CHUNK_MIN = 500  # instances: a long catch-up still asks ten scopes at once
TELEMETRY_SLICE_MIN = timedelta(minutes=15)  # a larger scope's span is cut no finer


def chunk_size(start: datetime, end: datetime, readers: int = 1) -> int:
    """Instances per provider metrics call over [start, end) when `readers` providers are
    read at once: `TELEMETRY_CHUNK` instance-minutes shared between them, at least
    `TELEMETRY_CHUNK_MIN` instances."""
    minutes = max(1, math.ceil((end - start) / timedelta(minutes=1)))
    return max(TELEMETRY_CHUNK_MIN, TELEMETRY_CHUNK // (minutes * max(1, readers)))


def time_slices(start: datetime, end: datetime, instances: int, readers: int = 1
                ) -> list[tuple[datetime, datetime]]:
    """[start, end) cut so that one call over `instances` brings back at most
    `TELEMETRY_CHUNK` instance-minutes (shared by `readers`), in slices of no less than
    `TELEMETRY_SLICE_MIN`. A chunk keeps its scopes whole, so a scope larger than
    `chunk_size` is a call of its own: read over the hours of a downtime in one call, a
    10,000-instance scope's answer held at once took 5 GB."""
    budget = TELEMETRY_CHUNK // max(1, readers)
    step = max(TELEMETRY_SLICE_MIN, timedelta(minutes=budget // max(1, instances)))
    if end - start <= step:
        return [(start, end)]
    cuts = [start + k * step for k in range(math.ceil((end - start) / step))]
    return list(zip(cuts, [*cuts[1:], end], strict=True))


def fetcher(name: str, provider: Provider, sink: Callable[[list[GpuMinute], datetime], None],
            readers: int) -> Fetch:
    """Ask the provider `chunk_size` instances at a time (`readers`: the providers read at
    once; a scope never split), and hand each call's readings to `sink` (and `observe`)
    before the next call: at organisation scale an hour of readings for every GPU held at
    once was gigabytes. A chunk whose call raises is a gap for its scopes while the others
    are read; when every chunk raises, the first error is raised, as one call would. Once a
    call's readings are stored, a provider that can leave out unchanged repeats is told so
    (`LeavesOutRepeats`): the next cycle's settling span then brings only what changed."""

    def ask(chunk: list[Instance], start: datetime, end: datetime, sink_since: datetime,
            observe: Observe | None, split: Split | None) -> list[Gap]:
        """One call; its readings stored; the scopes it could not read while the others
        answered."""
        if split is None:
            readings = provider.gpu_metrics(chunk, start, end)
        else:
            assert isinstance(provider, ReadsWholeScopes)
            readings = provider.gpu_metrics_split(chunk, start, end, *split)
        gaps = [Gap(provider=name, scope=g.scope + METRICS_SCOPE, error=g.error)
                for g in getattr(provider, "metric_gaps", [])]
        sink(readings, sink_since)
        if observe is not None:
            observe(readings)
        if isinstance(provider, LeavesOutRepeats):  # stored: unchanged copies may go
            provider.readings_stored()
        return gaps

    def fetch(wanted: list[Instance], start: datetime, end: datetime,
              observe: Observe | None, split: Split | None = None) -> list[Gap]:
        gaps: list[Gap] = []
        failed: list[ProviderError] = []
        chunks = behind.scope_chunks(wanted, chunk_size(start, end, readers))
        for chunk in chunks:
            # a scope larger than a chunk is asked a slice of the span at a time (the single
            # read of a provider that reads whole scopes excepted)
            slices = ([(start, end)] if split is not None
                      else time_slices(start, end, len(chunk), readers))
            try:
                for lo, hi in slices:
                    gaps += ask(chunk, lo, hi, start, observe, split)
            except ProviderError as exc:  # the chunk's later slices are not asked
                failed.append(exc)
                gaps += [Gap(provider=name, scope=scope + METRICS_SCOPE, error=str(exc))
                         for scope in sorted({behind.scope_keys(i)[0] for i in chunk})]
        if failed and len(failed) == len(chunks):
            raise failed[0]
        return gaps

    return fetch
