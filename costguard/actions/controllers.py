"""After a scale-in, check the controller: the next cycle verifies that the group did not
launch a replacement (its desired size and its running members), and raises an alert when
it did (an autoscaler or a health check fighting the scale-in, or a minimum raised behind
costguard's back).

What is expected of each group costguard shrank is kept in the store's control table
(`scaled_in_groups`), so a daemon restart between acting and checking loses nothing.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from costguard.alerts.outbox import enqueue
from costguard.clock import utc
from costguard.model import Instance, InstanceState, Owner
from costguard.store import control
from costguard.store.inventory import current_instances

log = logging.getLogger("costguard.act")

KEY = "scaled_in_groups"
_LIVE = (InstanceState.RUNNING, InstanceState.PENDING)


def group_key(inst: Instance) -> str:
    owner = inst.owner
    assert owner is not None
    return f"{inst.provider}|{inst.account}|{owner.kind}|{owner.scope}|{owner.name}"


def _load(s: Session) -> dict[str, dict[str, Any]]:
    raw = control.get(s, KEY)
    if not raw:
        return {}
    try:
        found = json.loads(raw)
        return found if isinstance(found, dict) else {}
    except ValueError:
        log.warning("unreadable %s: starting it afresh", KEY)
        return {}


def _members(instances: Sequence[Instance], key: str) -> tuple[int, int | None]:
    """(running members, the group's desired size as its members' listing says)."""
    live = [i for i in instances if i.owner is not None and i.state in _LIVE
            and group_key(i) == key]
    sizes = [i.owner.desired for i in live if i.owner is not None and i.owner.desired is not None]
    return len(live), (min(sizes) if sizes else None)


def expect(s: Session, removed: Sequence[tuple[Instance, str]], now: datetime) -> None:
    """Record what each group should look like after `removed` (member, policy) left it:
    the members still running, and the desired size lower by the members removed."""
    if not removed:
        return
    stored = _load(s)
    ids = {inst.instance_id for inst, _ in removed}
    instances = [i for i in current_instances(s) if i.instance_id not in ids]
    gone = Counter(group_key(inst) for inst, _ in removed)
    for inst, policy in removed:
        key = group_key(inst)
        if key in stored and stored[key]["at"] == now.isoformat():
            continue  # this group's expectation for this cycle is written
        members, desired = _members(instances, key)
        owner: Owner | None = inst.owner
        stored[key] = {
            "at": now.isoformat(), "policy": policy, "instance_id": inst.instance_id,
            "members": members,  # those left running
            # the sizes are this cycle's listing's, from before the members left
            "desired": (desired - gone[key]) if desired is not None else None,
            "label": str(owner),
        }
    control.put(s, KEY, json.dumps(stored, sort_keys=True), now)


def verify(s: Session, now: datetime) -> int:
    """Check every group shrunk in an earlier cycle against this cycle's inventory; alert
    on a replacement. Each group is checked once. Returns how many replaced."""
    stored = _load(s)
    due = {k: v for k, v in stored.items() if utc(datetime.fromisoformat(v["at"])) < now}
    if not due:
        return 0
    instances = current_instances(s)
    replaced = 0
    for key, want in due.items():
        members, desired = _members(instances, key)
        grew = (desired is not None and want["desired"] is not None
                and desired > want["desired"])
        if members > want["members"] or grew:
            replaced += 1
            provider, account = key.split("|")[:2]
            enqueue(s, dedupe_key=f"replaced|{key}|{want['at']}", kind="replaced",
                    severity="critical", now=now, policy=want["policy"], provider=provider,
                    instance_id=want["instance_id"],
                    subject=f"{want['label']} replaced what costguard scaled in "
                            f"({want['policy']})",
                    body=f"After the scale-in at {want['at']} the group should have "
                         f"{want['members']} running members"
                         + (f" and desired size {want['desired']}" if want["desired"] is not None
                            else "")
                         + f"; it now has {members}"
                         + (f" and desired size {desired}" if desired is not None else "")
                         + f" (account {account}). Its autoscaler or a raised minimum is "
                           "undoing the scale-in: check the group's scaling policies.",
                    context={"group": key, "expected": want,
                             "members": members, "desired": desired})
            log.warning("%s: replacement after scale-in (%d members, expected %d)",
                        want["label"], members, want["members"])
        del stored[key]
    control.put(s, KEY, json.dumps(stored, sort_keys=True), now)
    return replaced
