"""What people are told: subjects, bodies and recipients of warnings and action reports."""

from __future__ import annotations

from datetime import datetime

from costguard.actions.safety import SNOOZE_TAG
from costguard.model import Instance
from costguard.policy.evaluate import Finding


def recipients(to: tuple[str, ...], inst: Instance, team: str | None) -> list[str]:
    """Resolve `owner` and `team` against the instance; explicit channels pass through."""
    out: list[str] = []
    for r in to:
        if r == "owner":
            owner = inst.tags.get("owner")
            out.append(f"email:{owner}" if owner and "@" in owner else
                       f"slack:@{owner}" if owner else "unowned")
        elif r == "team":
            out.append(f"team:{team}" if team else "unattributed")
        else:
            out.append(r)
    return list(dict.fromkeys(out))


def label(inst: Instance) -> str:
    return f"{inst.name} ({inst.instance_id})" if inst.name else inst.instance_id


def snooze_hint(inst: Instance) -> str:
    return (f"snooze: `costguard snooze {inst.instance_id} --for 4h --reason \"...\"` "
            f"or set tag {SNOOZE_TAG}=<ISO time>")


def warning(f: Finding, deadline: datetime, message: str | None) -> tuple[str, str]:
    inst = f.instance
    verb = (f"removed from {inst.owner.kind} {inst.owner.name} (scale-in)" if inst.owner
            else "stopped")
    subject = (f"{label(inst)} will be {verb} at {deadline:%Y-%m-%d %H:%M} UTC "
               f"unless it gets busy ({f.policy.name})")
    body = "\n".join(filter(None, [
        f"Why: {f.reason}",
        f"Cost: ${f.usd_per_hour:,.2f}/h ({inst.instance_type}, {inst.lifecycle}, "
        f"{inst.region})",
        f"Deadline: {deadline.isoformat()}",
        snooze_hint(inst),
        message,
    ]))
    return subject, body


def notice(f: Finding, message: str | None) -> tuple[str, str]:
    inst = f.instance
    subject = f"{f.policy.name}: {label(inst)}: {f.reason}"
    body = "\n".join(filter(None, [
        f"Cost: ${f.usd_per_hour:,.2f}/h ({inst.instance_type}, {inst.lifecycle}, {inst.region})",
        message,
    ]))
    return subject, body


def render(template: str | None, f: Finding, deadline: datetime | None,
           spot_saving: float | None) -> str | None:
    if not template:
        return None
    return template.format(
        policy=f.policy.name, instance=label(f.instance), reason=f.reason,
        deadline=deadline.isoformat() if deadline else "none",
        usd_per_hour=f"{f.usd_per_hour:,.2f}",
        spot_savings_usd_per_hour=f"{spot_saving:,.2f}" if spot_saving is not None else "n/a",
    )
