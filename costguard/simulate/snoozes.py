"""Snoozes of the past, for the backtest: when was each instance snoozed, and until when.

Two sources, both already in the store:
- the action journal's `snooze` entries (the state machine's, `costguard snooze`'s and the
  Slack button's): each starts at its `intent_at` and names its end in the detail text
  ("snoozed until 2026-11-02T14:00:00+00:00 ...", or "... until 2026-11-02 14:00 UTC");
- a `costguard:snooze-until` tag in the stored inventory (tags as last seen): its start is
  unknown, so it is taken to have begun `max_snooze` before its end (the longest the policy
  would have honoured it), unless the journal already holds it.

Every snooze is cut to the backtested policy's `max_snooze` from its start, as the live
runner cuts them. Snoozes recorded under any policy count: a snooze is the owner saying
"leave this instance alone until then", and the policy under test may be new or renamed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from costguard.actions.safety import snoozed_until
from costguard.clock import utc
from costguard.model import Instance
from costguard.store.tables import ActionJournalRow

Window = tuple[datetime, datetime]
_UNTIL = re.compile(
    r"snoozed until (\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)"
    r"(Z|[+-]\d{2}:\d{2}| UTC)?")


def parse_until(detail: str) -> datetime | None:
    """The end a journal detail names, as an aware UTC time (None if it names none)."""
    m = _UNTIL.search(detail)
    if m is None:
        return None
    text, zone = m.group(1).replace(" ", "T"), m.group(2) or " UTC"
    offset = "+00:00" if zone in ("Z", " UTC") else zone
    try:
        return utc(datetime.fromisoformat(text + offset))
    except ValueError:
        return None


def journal_windows(session: Session, start: datetime, end: datetime
                    ) -> dict[tuple[str, str], list[Window]]:
    """(provider, instance id) -> [(began, ended)] from the journal's snooze entries that
    may overlap [start, end)."""
    out: dict[tuple[str, str], list[Window]] = defaultdict(list)
    rows = session.exec(select(ActionJournalRow).where(
        ActionJournalRow.action == "snooze", col(ActionJournalRow.intent_at) < end,
        col(ActionJournalRow.status).in_(["done", "skipped", "dry-run"])))
    for row in rows:
        until = parse_until(row.detail)
        if until is not None and until > start and until > row.intent_at:
            out[(row.provider, row.instance_id)].append((row.intent_at, until))
    return out


def windows_for(inst: Instance, journal: list[Window], max_snooze: timedelta) -> list[Window]:
    """Every snooze of `inst`, each cut to `max_snooze` from its start, merged and sorted."""
    spans = [(a, min(b, a + max_snooze)) for a, b in journal]
    tag_until = snoozed_until(inst)
    if tag_until is not None and not any(b == tag_until for _, b in journal):
        spans.append((tag_until - max_snooze, tag_until))
    merged: list[Window] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def snoozed_at(windows: list[Window], t: datetime) -> Window | None:
    return next((w for w in windows if w[0] <= t < w[1]), None)
