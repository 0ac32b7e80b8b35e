"""`recommend` (the CLI, the report's waste section, the console) takes the verdicts the
daemon stored within `recommend.refresh` instead of judging a week of readings again, and
judges afresh what has none, what was judged longer ago or after the window's end, and
everything with `fresh=True`; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from costguard.recommend.render import recommend_doc
from costguard.recommend.run import recommend, waste_of
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.telemetry.efficiency import Bottleneck
from tests.recommend.test_stored import CFG, NOW, inst, row


def _bottlenecks(db: Database, *, fresh: bool = False) -> tuple[dict[str, Bottleneck], int]:
    with db.session() as s:
        recs = recommend(s, NOW, lambda i: None, CFG, fresh=fresh)
    doc = recommend_doc(recs, CFG, everything=True)
    assert doc["summary"]["stored_verdicts"] == recs.reused
    return {r.fit.instance.instance_id: r.fit.efficiency.bottleneck for r in recs.items}, \
        recs.reused


def test_stored_verdicts_are_taken_while_young_and_only_for_the_window(db: Database) -> None:
    fleet = [inst(i) for i in ("i-stored", "i-old", "i-later", "i-none")]
    with db.session() as s:
        record_inventory(s, "aws", fleet, NOW - timedelta(minutes=5), complete=True)
        s.add_all([
            row("i-stored", NOW - timedelta(hours=2)),  # judged today: taken
            row("i-old", NOW - timedelta(hours=25)),  # older than refresh (a day)
            row("i-later", NOW + timedelta(hours=1)),  # after the window asked about
        ])
    # no readings in the store: what is judged afresh has too few
    got, reused = _bottlenecks(db)
    assert got == {"i-stored": Bottleneck.HEALTHY,
                   "i-old": Bottleneck.INSUFFICIENT_DATA,
                   "i-later": Bottleneck.INSUFFICIENT_DATA,
                   "i-none": Bottleneck.INSUFFICIENT_DATA}
    assert reused == 1
    with db.session() as s:
        recs = recommend(s, NOW, lambda i: None, CFG)
    assert recs.oldest_reused == NOW - timedelta(hours=2)
    # the report's waste section says so too
    waste = waste_of(recs)
    assert (waste.judged, waste.stored, waste.oldest_stored) == (4, 1, NOW - timedelta(hours=2))
    # the stored verdict kept its evidence; the fit is made again at today's prices
    stored = next(r for r in recs.items if r.fit.instance.instance_id == "i-stored")
    assert stored.fit.efficiency.underused and stored.fit.efficiency.gpus_used == 1
    # --fresh: every instance judged from its readings
    got, reused = _bottlenecks(db, fresh=True)
    assert set(got.values()) == {Bottleneck.INSUFFICIENT_DATA} and reused == 0
    # other thresholds (a longer window) are other verdicts: none stored, all judged
    with db.session() as s:
        other = recommend(s, NOW, lambda i: None,
                          CFG.model_copy(update={"window": timedelta(days=14)}))
    assert other.reused == 0
