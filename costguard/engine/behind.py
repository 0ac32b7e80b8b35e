"""Metric scopes that fell behind their provider's telemetry watermark.

A provider's metrics read can succeed for some scopes (an AWS account/region, a GCP project)
and fail for others, which come back as gaps (`provider.metric_gaps`). The watermark
(`telemetry_until:<provider>`) still moves on for the scopes that answered; each failed
scope is kept here with the time it is behind since, and its instances are read from that
time (never further back than the engine's lookback cap) until a read of the scope succeeds.
The scopes that answered are not read again.

A gap names a scope, not instances: `scope_keys` says which scopes an instance can be named
by (AWS names `account/region`, GCP the project, which is the instance's `account`). A gap
that names no instance asked about cannot be caught up: it is left as before (logged).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlmodel import Session

from costguard.clock import utc
from costguard.model import Instance
from costguard.store import control

log = logging.getLogger("costguard.engine")

Behind = dict[str, datetime]  # scope -> the start of the span it has not been read for


def key(provider: str) -> str:
    return f"telemetry_behind:{provider}"


def scope_keys(inst: Instance) -> tuple[str, str]:
    """The scopes a metrics gap can name `inst` by: `account/region` (AWS CloudWatch reads
    per account and region) or `account` (GCP Cloud Monitoring reads per project)."""
    return (f"{inst.account}/{inst.region}", inst.account)


def scope_chunks(instances: Sequence[Instance], size: int) -> list[list[Instance]]:
    """`instances` in chunks of about `size`, a scope (`scope_keys`' first) never split: a
    scope larger than `size` is a chunk of its own."""
    by_scope: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_scope[scope_keys(inst)[0]].append(inst)
    chunks: list[list[Instance]] = []
    current: list[Instance] = []
    for members in by_scope.values():
        if current and len(current) + len(members) > size:
            chunks.append(current)
            current = []
        current += members
    if current:
        chunks.append(current)
    return chunks


def load(s: Session, provider: str) -> Behind:
    raw = control.get(s, key(provider))
    if not raw:
        return {}
    try:
        stored = json.loads(raw)
        return {str(scope): utc(datetime.fromisoformat(at)) for scope, at in stored.items()}
    except (ValueError, TypeError, AttributeError):
        log.warning("telemetry: unreadable %s, starting it afresh", key(provider))
        return {}


def save(s: Session, provider: str, behind: Behind, now: datetime) -> None:
    if not behind and control.get(s, key(provider)) is None:
        return  # nothing was ever behind: no row for it
    value = json.dumps({scope: at.isoformat() for scope, at in sorted(behind.items())})
    control.put(s, key(provider), value, now)


def read_from(inst: Instance, start: datetime, behind: Behind, floor: datetime) -> datetime:
    """Where `inst`'s read starts: `start`, or earlier where its scope is behind (not before
    `floor`, the lookback cap)."""
    sinces = [behind[k] for k in scope_keys(inst) if k in behind]
    return min([start, *(max(at, floor) for at in sinces)])


def plan(wanted: Sequence[Instance], start: datetime, behind: Behind, floor: datetime
         ) -> tuple[list[Instance], list[tuple[datetime, list[Instance]]]]:
    """The instances read from `start`, and the others grouped by the earlier start their
    scope is behind since (oldest first)."""
    if not behind:
        return list(wanted), []
    on_time: list[Instance] = []
    late: dict[datetime, list[Instance]] = defaultdict(list)
    for inst in wanted:
        at = read_from(inst, start, behind, floor)
        if at < start:
            late[at].append(inst)
        else:
            on_time.append(inst)
    return on_time, sorted(late.items(), key=lambda item: item[0])


def update(behind: Behind, read: Iterable[tuple[Instance, datetime, bool]],
           gap_scopes: Iterable[str], inventory: Sequence[Instance], floor: datetime
           ) -> Behind:
    """The scopes behind after this cycle's reads.

    `read`: every instance asked about, the start its read asked from, and whether that
    read failed as a whole (a raised ProviderError); `gap_scopes`: the scopes the reads
    reported as gaps. A scope that failed is behind since the earliest start asked for it
    (or stays behind since when it already was); a scope whose instances all read is
    caught up; a scope no instance of `inventory` belongs to any more is dropped."""
    failed_scopes = set(gap_scopes)
    if not behind and not failed_scopes:
        return {}  # the usual cycle: nothing was behind, everything read
    out = dict(behind)
    read_ok: dict[str, bool] = {}
    failed_since: dict[str, datetime] = {}
    for inst, at, whole_failed in read:
        keys = scope_keys(inst)
        failed = whole_failed or any(k in failed_scopes for k in keys)
        for k in keys:
            read_ok[k] = read_ok.get(k, True) and not failed
            if failed and (k in failed_scopes or (whole_failed and k in behind)):
                failed_since[k] = min(at, failed_since.get(k, at))
    for scope, at in failed_since.items():
        out[scope] = min(out.get(scope, at), at)
    for scope in failed_scopes - set(failed_since):
        log.info("telemetry gap %s names no instance asked about: nothing to catch up", scope)
    for scope in list(out):
        if read_ok.get(scope):
            del out[scope]  # it read again: the span it missed is stored now
    present = {k for inst in inventory for k in scope_keys(inst)}
    return {scope: max(at, floor) for scope, at in out.items() if scope in present}
