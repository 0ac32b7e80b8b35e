"""Pre-stop hooks: a checkpoint on the host before a stop (policy `stop.pre_stop`).

At a stop's deadline, before the stop, `gate` asks the host's agent to run the hook: a row
in `stop_hooks` keyed by the stop's journal key (unique), which the agent receives in its
next ingest answer (`deliver`) and resolves by reporting (`report`). Later cycles find the
row: still running, it waits; succeeded, the stop goes on; failed or timed out, the policy
says (`on_failure` / `on_timeout`): `stop` goes on, `hold` cancels this stop. An agent that
never reports is timed out at the row's deadline (`timeout` + `REPORT_SLACK`).

Crash-safe by construction: the row is committed before anyone can run the hook, the agent
keeps the ids it ran (never twice), and a daemon that dies between the hook's report and the
stop finds the report on its next cycle and stops then; the stop's own journal intent keeps
it from being made twice. Dry-run policies never ask a host to run anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.actions.bulk import Settled, State
from costguard.actions.messages import label
from costguard.actions.stats import ActStats
from costguard.policy.actions import PreStop
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy
from costguard.store.readings import instances_with_source
from costguard.store.tables import ActionJournalRow, StopHookRow
from costguard.telemetry.hooks import OUTCOMES

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner

log = logging.getLogger("costguard.act")

REPORT_SLACK = timedelta(minutes=5)  # delivery (the agent's next push) and its report
# a host whose agent pushed within this long is asked to run its hooks: an agent that died
# since then times out (and the policy decides), it is not taken for a host without one
AGENT_HEARD = timedelta(hours=24)
OPEN = ("requested", "delivered")
MAX_DETAIL = 2000
Ref = tuple[str, str]


def describe(hook: PreStop) -> str:
    if hook.signal:
        return (f"pre-stop hook ({hook.signal} to the GPUs' processes, {_span(hook.timeout)} "
                "to checkpoint)")
    return f"pre-stop hook (the host's command, {_span(hook.timeout)} limit)"


def _span(d: timedelta) -> str:
    seconds = int(d.total_seconds())
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"


def agents_heard(s: Session, refs: Iterable[Ref], since: datetime) -> set[Ref]:
    """Which of `refs` had the agent's readings since `since` (settled hours included)."""
    return instances_with_source(s, "agent", since, refs)


def gate(runner: ActionRunner, policy: Policy, due: Sequence[tuple[Finding, State]],
         now: datetime, cycle_id: int | None, stats: ActStats
         ) -> list[tuple[Finding, State]]:
    """The due stops that may go ahead now (their reasons saying what the hook did); the
    others wait for their hook, or are held back (their state cleared, the journal says
    why)."""
    step = policy.stop_action or policy.scale_in_action
    hook = step.pre_stop if step is not None else None
    if hook is None or not due:
        return list(due)
    what = describe(hook)
    ready: list[tuple[Finding, State]] = []
    settled = Settled()
    if not policy.is_enforced:
        with runner.db.session() as s:
            for f, st in due:
                said = f"would run the {what} first (dry-run: nothing runs on the host)"
                _journal(s, settled, policy, f, st, "dry-run", said, now, cycle_id)
                ready.append((replace(f, reason=f"{f.reason}; {said}"), st))
            settled.write(s)
        return ready
    with runner.db.session() as s:
        keys = {journal.journal_key(policy.name, f.instance, "stop", st.episode): (f, st)
                for f, st in due}
        rows = {r.stop_key: r for r in s.exec(select(StopHookRow).where(
            col(StopHookRow.stop_key).in_(list(keys))))}
        heard = agents_heard(s, {(f.instance.provider, f.instance.instance_id)
                                 for f, _ in due}, now - AGENT_HEARD)
        for key, (f, st) in keys.items():
            row = rows.get(key)
            ref = (f.instance.provider, f.instance.instance_id)
            if row is None:
                if ref not in heard:
                    said = f"{what} skipped: no agent reports from this host"
                    _journal(s, settled, policy, f, st, "skipped", said, now, cycle_id)
                    ready.append((replace(f, reason=f"{f.reason}; {said}"), st))
                    continue
                s.add(StopHookRow(
                    id=uuid.uuid4().hex, stop_key=key, policy=policy.name, provider=ref[0],
                    instance_id=ref[1], kind="signal" if hook.signal else "command",
                    signal=hook.signal, timeout_s=int(hook.timeout.total_seconds()),
                    status="requested", requested_at=now,
                    deadline=now + hook.timeout + REPORT_SLACK))
                log.info("stop %s (%s): %s asked of its agent; the stop waits for it",
                         label(f.instance), policy.name, what)
                stats.waiting[policy.name] += 1
                continue
            if row.status in OPEN:
                if now < row.deadline:
                    stats.waiting[policy.name] += 1
                    continue  # the agent has not reported yet
                row.status, row.finished_at = "timed_out", now
                row.detail = (f"the agent did not report by {row.deadline:%H:%M} UTC "
                              + ("(it never fetched the hook)" if row.delivered_at is None
                                 else "(it fetched the hook, then went silent)"))
                s.add(row)
            goes_on = (row.status in ("succeeded", "skipped")
                       or (row.status == "failed" and hook.on_failure == "stop")
                       or (row.status == "timed_out" and hook.on_timeout == "stop"))
            said = f"{what} {row.status.replace('_', ' ')}" + (f": {row.detail}" if row.detail
                                                               else "")
            if goes_on:
                _journal(s, settled, policy, f, st, _status(row.status), said, now, cycle_id)
                ready.append((replace(f, reason=f"{f.reason}; {said}"), st))
                continue
            rule = "on_failure" if row.status == "failed" else "on_timeout"
            held = f"{said}; the stop is held back ({rule}: hold)"
            _journal(s, settled, policy, f, st, "held", held, now, cycle_id)
            settled.state(st, state="cleared", since=now, deadline=None)
            stats.skipped[policy.name] += 1
            log.warning("stop %s (%s): %s", label(f.instance), policy.name, held)
        settled.write(s)
    return ready


def _status(outcome: str) -> str:
    return {"succeeded": "done", "skipped": "skipped"}.get(outcome, outcome)


def _journal(s: Session, settled: Settled, policy: Policy, f: Finding, st: State,
             status: str, detail: str, now: datetime, cycle_id: int | None) -> None:
    """One `pre_stop` journal entry per stop (a stop refused by a cap after its hook comes
    due again next cycle: its hook's entry is not repeated)."""
    key = journal.journal_key(policy.name, f.instance, "pre_stop", st.episode)
    if s.exec(select(func.count()).select_from(ActionJournalRow).where(
            ActionJournalRow.key == key)).one():
        return
    settled.rows.record(key=key, cycle_id=cycle_id, policy=policy.name, inst=f.instance,
                        action="pre_stop", dry_run=not policy.is_enforced, status=status,
                        detail=detail[:MAX_DETAIL], usd_per_hour=f.usd_per_hour, now=now)


def deliver(s: Session, refs: Iterable[Ref], now: datetime) -> list[dict[str, Any]]:
    """The open hooks of these instances, for an agent's ingest answer; marked delivered
    (the first time). A hook past its deadline is not handed out any more."""
    refs = set(refs)
    if not refs:
        return []
    out = []
    for provider in {p for p, _ in refs}:
        ids = [i for p, i in refs if p == provider]
        for row in s.exec(select(StopHookRow).where(
                StopHookRow.provider == provider, col(StopHookRow.instance_id).in_(ids),
                col(StopHookRow.status).in_(OPEN), StopHookRow.deadline > now)):
            if row.delivered_at is None:
                row.status, row.delivered_at = "delivered", now
                s.add(row)
            out.append({"id": row.id, "provider": row.provider, "instance_id": row.instance_id,
                        "kind": row.kind, "signal": row.signal, "timeout_s": row.timeout_s})
    return out


class HookUnknown(LookupError):
    """No such hook for this instance (404)."""


def report(s: Session, hook_id: str, ref: Ref | None, status: str, detail: str,
           now: datetime) -> StopHookRow:
    """The agent's report of a hook it ran. `ref`: the instance the sender proved (None:
    the shared token, which may report any instance's hook). Idempotent: a second report
    of a finished hook changes nothing. Raises HookUnknown, or ValueError for a status
    that is not an outcome."""
    if status not in OUTCOMES:
        raise ValueError(f"status must be one of {', '.join(OUTCOMES)}, got {status!r}")
    row = s.get(StopHookRow, hook_id)
    if row is None or (ref is not None and (row.provider, row.instance_id) != ref):
        raise HookUnknown(hook_id)
    if row.status in OPEN:
        row.status, row.detail, row.finished_at = status, detail[:MAX_DETAIL], now
        s.add(row)
    return row
