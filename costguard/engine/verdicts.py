"""The cycle's efficiency verdicts: renewed when due, kept for the `underused:` conditions
that read them, and read for the weekly digest once per slot."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session

from costguard.model import Instance
from costguard.policy.schema import Policy
from costguard.recommend import stored
from costguard.recommend.digest import digest_slot, enqueue_digests
from costguard.recommend.fit import PriceLookup
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.verdict import StoredVerdict, judged_with, settings_key

Held = dict[stored.Ref, StoredVerdict]


def judging(base: RecommendSettings, policies: Sequence[Policy]) -> list[RecommendSettings]:
    """The thresholds verdicts are kept under: `recommend:`'s (the metric and the digest
    read those), and each `underused:` condition's own."""
    return [base] + [judged_with(base, p.condition.underused)
                     for p in policies if p.condition.underused]


class Verdicts:
    """What the engine keeps of the stored verdicts between cycles.

    Only the `underused:` conditions' verdicts are held: a verdict is ~3.6 KB in memory,
    every GPU instance has one once judged (~350 MB at 100,000), and without such a
    condition nothing reads them each cycle. They are renewed when a cycle judged any (a
    verdict cannot age past trust unjudged: it is due, and judged, after one refresh
    period), building only those judged since (`stored.reload`). The digest reads them
    once, at the first cycle of its slot in this process (what it enqueues is deduplicated
    by team and week)."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}  # by settings key
        self._digested: datetime | None = None  # the last digest slot enqueued from here

    def renew(self, session: Session, base: RecommendSettings, policies: Sequence[Policy],
              instances: Sequence[Instance], now: datetime, price: PriceLookup
              ) -> tuple[int, int]:
        """Judge the verdicts that are due, keep the conditions', and enqueue the week's
        underused-GPU digests when it is time; returns (judged, digests enqueued). The
        caller commits `session`, then calls `enqueued` with `now`."""
        kept = judging(base, policies)
        keys = [settings_key(c) for c in kept]
        conditions = dict(zip(keys[1:], kept[1:], strict=True))
        judged = stored.refresh_all(session, instances, now, price, kept)
        if judged or set(conditions) != set(self.held):
            self.held = {k: stored.reload(session, c, now, self.held.get(k, {}))
                         for k, c in conditions.items()}
        slot = digest_slot(base.digest, now) if base.digest.enabled else None
        digests = 0
        if slot is not None and slot != self._digested:
            verdicts = self.held.get(keys[0])
            if verdicts is None:
                verdicts = stored.load(session, base, now)
            digests = enqueue_digests(session, verdicts, instances, base.digest, now)
        return judged, digests

    def enqueued(self, base: RecommendSettings, now: datetime) -> None:
        """The session `renew` wrote in is committed: its digest slot is done here."""
        if base.digest.enabled and (slot := digest_slot(base.digest, now)) is not None:
            self._digested = slot

    def by_policy(self, base: RecommendSettings, policies: Sequence[Policy]
                  ) -> dict[int, Held]:
        """The held verdicts each `underused:` policy reads, by the policy's index."""
        return {n: self.held.get(settings_key(judged_with(base, p.condition.underused)), {})
                for n, p in enumerate(policies) if p.condition.underused}
