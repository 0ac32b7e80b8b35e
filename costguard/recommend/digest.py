"""The weekly "underused GPUs" digest: one message per team, from the stored verdicts.

At the first cycle of the configured weekday hour (`recommend.digest`, Mondays 09:00 UTC
by default, and within the day after it: a daemon started on a Thursday does not send last
Monday's), each team with underused spend above `min_usd` gets one alert through the
outbox, addressed `team:<name>` (the routing file says which channel and list that is;
spend no team answers for goes to `unattributed`). The dedupe key names the team and the
week, so a restart or a second replica never sends it twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlmodel import Session

from costguard.alerts.outbox import enqueue_many
from costguard.costs.attribution import UNATTRIBUTED
from costguard.model import Instance
from costguard.recommend.settings import WEEKDAYS, WeeklyDigest
from costguard.recommend.verdict import StoredVerdict

TOP = 10  # instances named per message; the rest are counted


def digest_slot(cfg: WeeklyDigest, now: datetime) -> datetime | None:
    """The week's digest time if `now` falls in the day after it, else None."""
    day = now.replace(hour=cfg.hour_utc, minute=0, second=0, microsecond=0)
    slot = day - timedelta(days=(now.weekday() - WEEKDAYS.index(cfg.weekday)) % 7)
    if slot > now:
        slot -= timedelta(days=7)
    return slot if now - slot < timedelta(days=1) else None


def enqueue_digests(session: Session, verdicts: Mapping[tuple[str, str], StoredVerdict],
                    instances: Sequence[Instance], cfg: WeeklyDigest, now: datetime) -> int:
    """Enqueue this week's digest for every team with underused spend; returns how many
    were new. `instances` give the display names (an instance not among them: its id)."""
    if not cfg.enabled or (slot := digest_slot(cfg, now)) is None:
        return 0
    names: dict[tuple[str, str], str] = {
        (i.provider, i.instance_id): i.name or i.instance_id for i in instances}
    teams: dict[str, list[tuple[tuple[str, str], StoredVerdict]]] = defaultdict(list)
    for ref, v in verdicts.items():
        if v.efficiency.underused:
            teams[v.team or UNATTRIBUTED].append((ref, v))
    alerts = []
    for team, items in sorted(teams.items()):
        spent = sum(v.underused_usd for _, v in items)
        if spent <= cfg.min_usd:
            continue
        items.sort(key=lambda t: (-t[1].monthly_usd, -t[1].underused_usd, t[0]))
        saves = sum(max(0.0, v.monthly_usd) for _, v in items)
        days = max(round(items[0][1].efficiency.window_end.timestamp()
                         - items[0][1].efficiency.window_start.timestamp()) / 86400, 1)
        subject = (f"Underused GPUs, {_who(team)}: ${spent:,.0f} in {days:g} days on "
                   f"{len(items)} instance{'s' * (len(items) != 1)}"
                   + (f"; cheaper fits save ${saves:,.0f}/month" if saves else ""))
        lines = [f"- {names.get(ref, ref[1])}: {v.summary()}" for ref, v in items[:TOP]]
        if len(items) > TOP:
            lines.append(f"- and {len(items) - TOP} more")
        if team == UNATTRIBUTED:
            head, see = "that no team answers for", "costguard recommend --by team"
        else:
            head = "(the week's efficiency verdicts)"
            see = f"costguard recommend --filter team={team}"
        body = (f"GPUs that work, but far less than they cost, {head}:\n" + "\n".join(lines)
                + f"\n\nSee: {see}")
        alerts.append(dict(
            dedupe_key=f"underused-digest:{team}:{slot:%Y-%m-%d}", kind="underused",
            severity="info", subject=subject, body=body, now=now,
            recipients=("unattributed",) if team == UNATTRIBUTED else (f"team:{team}",),
            team=None if team == UNATTRIBUTED else team,
            context={"week_of": f"{slot:%Y-%m-%d}", "underused_usd": round(spent, 2),
                     "monthly_savings_usd": round(saves, 2), "instances": len(items)}))
    return sum(enqueue_many(session, alerts))


def _who(team: str) -> str:
    return "no team" if team == UNATTRIBUTED else f"team {team}"
