"""What an alert says, independent of the channel: Slack and email render the same view."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from costguard.clock import utc
from costguard.policy.base import duration_arg, format_duration
from costguard.store.tables import AlertRow

# (token carried by the button, label) — "tomorrow" is resolved at click time
SNOOZE_CHOICES: tuple[tuple[str, str], ...] = (
    ("1h", "Snooze 1h"), ("4h", "Snooze 4h"), ("tomorrow", "Until tomorrow 09:00 UTC"),
)
TOMORROW_HOUR_UTC = 9


def snooze_until(choice: str, now: datetime, max_snooze: timedelta) -> datetime:
    """When a snooze `choice` (1h, 4h, tomorrow, or any duration) ends, capped by policy."""
    if choice == "tomorrow":
        tomorrow = (now + timedelta(days=1)).date()
        wanted = datetime(tomorrow.year, tomorrow.month, tomorrow.day, TOMORROW_HOUR_UTC,
                          tzinfo=now.tzinfo)
        return min(wanted, now + max_snooze)
    # capped before it is added: a huge duration (9999999d) must not overflow the date
    return now + min(duration_arg(choice), max_snooze)


def snooze_options(max_snooze: timedelta) -> list[tuple[str, str]]:
    """The snooze buttons to offer: those the cap allows, plus the cap itself if smaller."""
    out: list[tuple[str, str]] = []
    for token, label in SNOOZE_CHOICES:
        if token == "tomorrow":
            if max_snooze >= timedelta(hours=24):
                out.append((token, label))
            continue
        if duration_arg(token) <= max_snooze:
            out.append((token, label))
    if not out or (len(out) < len(SNOOZE_CHOICES) and max_snooze > timedelta(hours=1)):
        cap = format_duration(max_snooze)
        if all(t != cap for t, _ in out):
            out.append((cap, f"Snooze {cap} (max)"))
    return out


@dataclass(frozen=True)
class AlertView:
    """The facts every channel shows: what, why, the evidence, the dollars and the deadline."""

    alert_id: int | None
    dedupe_key: str
    kind: str
    severity: str
    subject: str
    body: str
    created_at: datetime
    policy: str | None
    provider: str | None
    instance_id: str | None
    instance_type: str | None
    team: str | None
    owner: str | None
    reason: str | None
    evidence: str | None
    usd_per_hour: float | None
    deadline: datetime | None
    snooze: tuple[tuple[str, str], ...]  # (token, label); empty when not snoozable

    @property
    def interactive(self) -> bool:
        return bool(self.snooze) and self.instance_id is not None and self.policy is not None

    @property
    def dollars(self) -> str | None:
        return None if self.usd_per_hour is None else f"${self.usd_per_hour:,.2f}/h"

    @property
    def deadline_text(self) -> str | None:
        return None if self.deadline is None else f"{self.deadline:%Y-%m-%d %H:%M} UTC"

    @property
    def snooze_command(self) -> str | None:
        if not self.interactive:
            return None
        return f'costguard snooze {self.instance_id} --for 4h --reason "..."'

    @property
    def details(self) -> str:
        """The body lines that the structured fields do not already say."""
        skip = ("Why:", "Cost:", "Deadline:", "snooze:") if self.reason else ()
        lines = [ln for ln in self.body.splitlines() if not ln.startswith(skip)]
        return "\n".join(lines).strip()


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, str) and value:
        try:
            return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def view_of(alert: AlertRow, max_snooze: timedelta) -> AlertView:
    ctx = alert.context or {}
    deadline = _time(ctx.get("deadline"))
    snoozable = alert.kind == "idle-warning" and deadline is not None
    return AlertView(
        alert_id=alert.id, dedupe_key=alert.dedupe_key, kind=alert.kind,
        severity=alert.severity, subject=alert.subject, body=alert.body,
        created_at=utc(alert.created_at), policy=alert.policy, provider=alert.provider,
        instance_id=alert.instance_id, instance_type=ctx.get("instance_type"),
        team=alert.team, owner=alert.owner, reason=ctx.get("reason"),
        evidence=ctx.get("evidence"), usd_per_hour=_float(ctx.get("usd_per_hour")),
        deadline=deadline,
        snooze=tuple(snooze_options(max_snooze)) if snoozable else (),
    )
