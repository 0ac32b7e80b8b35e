"""What one cycle did, as `costguard run --once` prints it and the cycle row keeps it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class CycleSummary:
    cycle_id: int
    started_at: datetime
    instances: dict[str, int] = field(default_factory=dict)
    gaps: list[dict[str, str]] = field(default_factory=list)
    readings: int = 0
    # per provider: points its metrics calls read that no reading can hold, dropped (no
    # data; costguard/providers/cloud_readings.py)
    readings_dropped: dict[str, int] = field(default_factory=dict)
    accrued_usd: float = 0.0
    idle_usd: float = 0.0
    findings: dict[str, int] = field(default_factory=dict)
    # idle findings whose stop the stop's checks held back: idle-but-busy, or untrusted
    # signals (policy/stop_check.py); still idle waste in the report
    held_back: dict[str, int] = field(default_factory=dict)
    actions: dict[str, Any] = field(default_factory=dict)
    alerts_sent: int = 0
    budgets: int = 0
    anomalies: int = 0
    judged: int = 0  # GPU instances whose efficiency verdict was renewed
    digests: int = 0  # weekly underused-GPU digests enqueued
    paused: bool = False
    abandoned_cycles: int = 0  # earlier cycles found left running by a dead process, closed
    # volumes, snapshots, addresses: listed by kind (when listed this cycle), findings by
    # policy, and what was done to them (costguard/standing/)
    standing: dict[str, Any] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # the process's CPU (every thread's) during each stage: what a stage costs a core,
    # where its wall time also waits on the clouds
    stage_cpu_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["started_at"] = self.started_at.isoformat()
        return d

    def lines(self) -> list[str]:
        """The summary in words, one short line per part (`run --once` in text mode)."""
        total = sum(self.instances.values())
        per = ", ".join(f"{p} {n}" for p, n in self.instances.items())
        out = [f"cycle {self.cycle_id} at {self.started_at:%Y-%m-%d %H:%M:%S} UTC: "
               f"{total} instances ({per or 'no provider'}), {self.readings} readings, "
               f"{len(self.gaps)} gaps" + (" (paused: no actions)" if self.paused else ""),
               f"spend: accrued ${self.accrued_usd:,.2f} (idle ${self.idle_usd:,.2f}); "
               f"budgets {self.budgets}, anomalies opened or grown {self.anomalies}, "
               f"alerts sent {self.alerts_sent}",
               "findings: " + (_counts(self.findings) or "none")]
        if self.held_back:
            out.append("stops held back (work in progress on the host, or untrusted "
                       f"signals; costguard explain says which): {_counts(self.held_back)}")
        done = [f"{verb.replace('_', ' ')} {sum(by.values())} ({_counts(by)})"
                for verb, by in self.actions.items() if isinstance(by, dict) and by]
        done += [f"{verb} {n}" for verb, n in self.actions.items()
                 if isinstance(n, int) and n]
        out.append("actions: " + ("; ".join(done) or "none"))
        if self.standing.get("findings"):
            acts = [f"{verb} {sum(by.values())}" for verb, by in
                    self.standing.get("actions", {}).items()]
            out.append("volumes, snapshots, addresses: findings "
                       f"{_counts(self.standing['findings'])}"
                       + (f"; {', '.join(acts)}" if acts else ""))
        if self.readings_dropped:
            out.append(f"readings dropped, not valid (no data, never idle; the log names "
                       f"them): {_counts(self.readings_dropped)}")
        if self.abandoned_cycles:
            out.append(f"closed {self.abandoned_cycles} earlier cycle(s) left running by a "
                       "process that ended (abandoned; costguard status counts them)")
        out += [f"gap: {g['provider']} {g['scope']}: {g['error']}" for g in self.gaps]
        return out


def _counts(by: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in by.items())


STAGES = ("collect", "telemetry", "window", "accrue", "evaluate", "act", "alert")


def stage_counts(summary: CycleSummary, stage: str) -> dict[str, Any]:
    """The counts worth a log field for each stage."""
    if stage == "collect":
        return {"instances": sum(summary.instances.values()), "gaps": len(summary.gaps)}
    if stage == "telemetry":
        return {"readings": summary.readings}
    if stage == "accrue":
        return {"accrued_usd": summary.accrued_usd, "idle_usd": summary.idle_usd}
    if stage == "evaluate":
        return {"findings": sum(summary.findings.values())}
    if stage == "act":
        out: dict[str, Any] = {"paused": summary.paused}
        for kind, per_policy in summary.actions.items():
            if isinstance(per_policy, Mapping):
                out[kind] = sum(per_policy.values())
            elif isinstance(per_policy, int):
                out[kind] = per_policy
        return out
    if stage == "alert":
        return {"alerts_sent": summary.alerts_sent}
    return {}


def log_stages(summary: CycleSummary, log: logging.Logger) -> None:
    """One `cycle stage done` line per stage the cycle ran, its time and counts as fields
    (JSON keys, or key=value in text), not in the message: the daemon's after each cycle,
    and `run --once`'s when its logs are JSON."""
    for stage in STAGES:
        if stage in summary.stage_seconds:
            log.info("cycle stage done", extra={
                "cycle": summary.cycle_id, "stage": stage,
                "seconds": round(summary.stage_seconds[stage], 3),
                "cpu_seconds": round(summary.stage_cpu_seconds.get(stage, 0.0), 3),
                **stage_counts(summary, stage)})
