"""Recovery at the start of the act stage: what a crash or a failed call left open.

An intent without a result (the process died between the journal write and the provider
call's answer) and a stop that raised but may have taken effect are both settled from the
state the latest inventory shows, before the state machine runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlmodel import Session

from costguard.actions import journal
from costguard.store.inventory import to_instance
from costguard.store.tables import InstanceRow, PolicyStateRow

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats

# a failed stop older than this has been retried (or cleared) by the state machine since
RECONCILE_FAILED_WITHIN = timedelta(days=2)


def reconcile(r: ActionRunner, now: datetime, stats: ActStats) -> None:
    """Resolve intents left by a crash, using the state inventory now shows."""
    with r.db.session() as s:
        for row in journal.unresolved(s):
            inst_row = s.get(InstanceRow, (row.provider, row.instance_id))
            state = inst_row.state if inst_row else "unknown"
            done = state in {"stop": ("stopped", "stopping", "terminated"),
                              "terminate": ("terminated",),
                              "scale_in": ("terminated",),
                              "start": ("pending", "running")}.get(row.action, ())
            if row.action == "scale_in" and inst_row is not None and inst_row.gone:
                done, state = True, "gone"  # the group terminated it
            status = "done" if done else "interrupted"
            if row.action in ("park", "restore"):  # a group's: keep the sizes it carries
                head, sep, sizes = row.detail.partition(" | sizes=")
                journal.resolve(s, row.id or 0, status,
                                f"{head} (interrupted, resolved after restart){sep}{sizes}",
                                now)
                stats.reconciled += 1
                continue
            journal.resolve(s, row.id or 0, status,
                            f"resolved after restart: instance is {state}", now)
            stats.reconciled += 1
            st = s.get(PolicyStateRow, (row.policy, row.provider, row.instance_id))
            if done and st is not None and row.action != "stop":
                st.state, st.since = ("terminated" if row.action in ("terminate", "scale_in")
                                      else "cleared"), now
                s.add(st)
            elif done and st is not None:
                st.state, st.since = "acted", now
                s.add(st)
                if inst_row is not None:
                                r._action_alert(s, row.policy, to_instance(inst_row), st.episode,
                                       "stopped", f"stopped ({row.detail or 'idle'})", now)
        _failed_stops(r, s, now, stats)

def _failed_stops(r: ActionRunner, s: Session, now: datetime, stats: ActStats) -> None:
    """A stop that raised may still have taken effect: when inventory now shows the
    instance stopped while its episode still waits on that stop, journal it as done
    (a second row: the failure stays on record) and tell the owner, once."""
    for row in journal.failed(s, "stop", since=now - RECONCILE_FAILED_WITHIN):
        st = s.get(PolicyStateRow, (row.policy, row.provider, row.instance_id))
        if (st is None or st.state != "warned"
                or st.episode != journal.episode_of(row.key)
                or journal.completed(s, row.key)):
            continue
        inst_row = s.get(InstanceRow, (row.provider, row.instance_id))
        if inst_row is None or inst_row.state not in ("stopped", "stopping"):
            continue  # still running: the state machine retries the stop
        inst = to_instance(inst_row)
        journal.record(s, key=row.key, cycle_id=row.cycle_id, policy=row.policy, inst=inst,
                       action="stop", dry_run=False, status="done",
                       detail=f"reconciled: the call failed ({row.detail}) but inventory "
                              f"shows the instance {inst_row.state}",
                       usd_per_hour=row.usd_per_hour, now=now)
        st.state, st.since, st.deadline = "acted", now, None
        s.add(st)
        stats.reconciled += 1
        r._action_alert(s, row.policy, inst, st.episode, "stopped",
                           "stopped (the call reported an error; inventory confirms it)",
                           now)
