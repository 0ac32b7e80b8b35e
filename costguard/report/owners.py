"""Spend by owner: which Auto Scaling group, instance group or node pool spends (and wastes)
the most, and filters `managed` and `owner-kind`; and by `kind` (instance, notebook,
workload: what a policy governs it as).

The owner is read from each instance's current inventory row (instances.owner), so the
report is the spend per instance (the same query as `--by instance`) regrouped by owner:
`owner` is `KIND:NAME` (`asg:gpu-asg`, `gke:gpu-pool`), `unmanaged` for a plain instance;
`owner-kind` is the kind (`asg`, `mig`, `gke` ...) or `unmanaged`; `managed` is true/false;
`kind` is instances.kind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from costguard.report.figures import Report, ReportRow
from costguard.store.tables import InstanceRow

OWNER_DIMENSIONS = ("owner", "owner-kind", "managed", "kind")
UNMANAGED = "unmanaged"


def owner_values(owner: Mapping[str, Any] | None) -> dict[str, str]:
    if not owner:
        return {"owner": UNMANAGED, "owner-kind": UNMANAGED, "managed": "false"}
    return {"owner": f"{owner['kind']}:{owner['name']}", "owner-kind": str(owner["kind"]),
            "managed": "true"}


def _accepts(wanted: str, value: str) -> bool:
    return value in {w.strip() for w in wanted.split(",")}


def spend_with_owners(session: Session, by: Sequence[str], since: datetime, until: datetime,
                      filters: Mapping[str, str], run: Callable[..., Report]) -> Report:
    """`run` (queries.spend) per instance, regrouped by `by` with the owner dimensions."""
    plain_by = [d for d in by if d not in OWNER_DIMENSIONS]
    owner_filters = {k: v for k, v in filters.items() if k in OWNER_DIMENSIONS}
    plain_filters = {k: v for k, v in filters.items() if k not in OWNER_DIMENSIONS}
    per_instance = run(session, [*plain_by, "instance"], since, until, plain_filters)
    owners = {iid: owner_values(owner) | {"kind": kind} for iid, owner, kind in session.execute(
        select(InstanceRow.instance_id, InstanceRow.owner,  # type: ignore[call-overload]
               InstanceRow.kind))}
    sums: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * 6)
    members: dict[tuple[str, ...], set[str]] = defaultdict(set)
    every: set[str] = set()
    for row in per_instance.rows:
        iid = row.key[-1]
        values = owners.get(iid) or owner_values(None) | {"kind": "instance"}
        if not all(_accepts(want, values[dim]) for dim, want in owner_filters.items()):
            continue
        plain = dict(zip(plain_by, row.key[:-1], strict=True))
        key = tuple(values[d] if d in OWNER_DIMENSIONS else plain[d] for d in by)
        acc = sums[key]
        for i, measure in enumerate((row.cost_micros, row.idle_cost_micros,
                                     row.spot_cost_micros, row.gpu_seconds,
                                     row.idle_gpu_seconds, row.savings_micros)):
            acc[i] += measure
        members[key].add(iid)
        every.add(iid)
    rows = [ReportRow(key=key, cost_micros=a[0], idle_cost_micros=a[1], spot_cost_micros=a[2],
                      gpu_seconds=a[3], idle_gpu_seconds=a[4], instances=len(members[key]),
                      savings_micros=a[5]) for key, a in sums.items()]
    rows.sort(key=lambda r: (-r.cost_micros, r.key))
    total = ReportRow(key=(), cost_micros=sum(r.cost_micros for r in rows),
                      idle_cost_micros=sum(r.idle_cost_micros for r in rows),
                      spot_cost_micros=sum(r.spot_cost_micros for r in rows),
                      gpu_seconds=sum(r.gpu_seconds for r in rows),
                      idle_gpu_seconds=sum(r.idle_gpu_seconds for r in rows),
                      instances=len(every), savings_micros=sum(r.savings_micros for r in rows))
    return Report(by=tuple(by), since=since, until=until, rows=rows if by else [],
                  total=total, filters=dict(filters))
