"""What people are told: subjects, bodies and recipients of warnings and action reports."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.actions.safety import SNOOZE_TAG
from costguard.alerts.addresses import owner_recipient
from costguard.model import Instance
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy, format_duration
from costguard.providers.base import spelled_tag

if TYPE_CHECKING:
    from costguard.costs.attribution import Attributable, Attributor
    from costguard.providers.base import Provider


def recipients(to: tuple[str, ...], inst: Attributable, team: str | None) -> list[str]:
    """Resolve `owner` and `team` against the instance (or the volume, snapshot or address);
    explicit channels pass through."""
    out: list[str] = []
    for r in to:
        if r == "owner":
            out.append(owner_recipient(inst.tags.get("owner")))
        elif r == "team":
            out.append(f"team:{team}" if team else "unattributed")
        else:
            out.append(r)
    return list(dict.fromkeys(out))


def label(inst: Instance) -> str:
    return f"{inst.name} ({inst.instance_id})" if inst.name else inst.instance_id


def snooze_hint(inst: Instance) -> str:
    return (f"snooze: `costguard snooze {inst.instance_id} --for 4h --reason \"...\"` "
            f"or set {spelled_tag(inst.provider, SNOOZE_TAG)}=<ISO time>")


def warning(f: Finding, deadline: datetime, message: str | None) -> tuple[str, str]:
    inst = f.instance
    verb = (f"removed from {inst.owner.kind} {inst.owner.name} (scale-in)" if inst.owner
            else "stopped")
    # a dry-run policy's warning is journaled, never sent: it says what would have happened
    will = "will" if f.policy.is_enforced else "would"
    mode = "" if f.policy.is_enforced else ", dry-run"
    subject = (f"{label(inst)} {will} be {verb} at {deadline:%Y-%m-%d %H:%M} UTC "
               f"unless it gets busy ({f.policy.name}{mode})")
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


def after_stop_note(providers: Mapping[str, Provider], policy: Policy, inst: Instance) -> str:
    """What a stopped instance still costs, and what happens to it next."""
    provider = providers.get(inst.provider)
    stopped_cost = getattr(provider, "stopped_cost", None)
    quote = stopped_cost(inst) if stopped_cost is not None else None
    lines = [f"While stopped it still costs ${quote.usd_per_hour:,.4f}/h ({quote.source})."
             if quote is not None else
             f"Its attached disks are still billed while it is stopped (their cost could "
             f"not be read from {inst.provider})."]
    term = policy.terminate_action
    if term is not None:
        lines.append(f"If it stays stopped for {format_duration(term.after_stopped)} it "
                     f"will be terminated" + (" after a snapshot" if term.snapshot else "")
                     + "; start it, snooze it or tag it costguard:protect to keep it.")
    if policy.start_action is not None:
        lines.append("costguard starts it again when office hours begin.")
    return "\n".join(lines)


def action_alert(attributor: Attributor, policy: str, inst: Instance, episode: int, verb: str,
                 reason: str, now: datetime, extra: str = "") -> dict[str, Any]:
    """The arguments of `outbox.enqueue` for the alert that an action was taken."""
    team = attributor.dimensions(inst).get("team")
    return dict(
        dedupe_key=f"action|{policy}|{inst.provider}|{inst.instance_id}|{episode}",
        kind="action", severity="warning", now=now, policy=policy,
        provider=inst.provider, instance_id=inst.instance_id, team=team,
        owner=inst.tags.get("owner"),
        recipients=recipients(("owner", "team"), inst, team),
        subject=f"{label(inst)} was {verb} by costguard ({policy})",
        body=f"Why: {reason}\nStart it again when you need it; costguard will not "
             f"stop it again unless it sits idle for the policy's window."
             + (f"\n{extra}" if extra else ""),
        context={"reason": reason, "instance_type": inst.instance_type})
