"""Reports read the per-day summary and instance day runs: same money, same instance counts
as the raw intervals, across gaps, re-attribution, partial rollups and stale summaries.

Fleet (hand-built intervals, 2 h each at the listed rate, days D0..D3):
  i-1 research p4d, days 0, 1, 3 (absent on day 2)
  i-2 vision g5 on days 0, 1, then re-tagged research on days 2, 3
  i-3 untagged m5 spot, day 1 only
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session, select

from costguard.costs.rollup import SUMMARY_UNTIL, rebuild_summaries, rollup
from costguard.report.figures import Report
from costguard.report.queries import spend
from costguard.store import control
from costguard.store.db import Database
from costguard.store.rollup_tables import CostRunRow, CostSummaryRow
from costguard.store.tables import ControlRow
from tests.costs.fleet import add_interval

D0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def day(n: int) -> datetime:
    return D0 + n * DAY + timedelta(hours=3)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    with database.session() as s:
        for n in (0, 1, 3):
            add_interval(s, "i-1", day(n), 2, 32.77, team="research")
        for n in range(4):
            add_interval(s, "i-2", day(n), 2, 1.006, team="vision" if n < 2 else "research",
                         itype="g5.xlarge", gpus=1, idle=n == 1)
        add_interval(s, "i-3", day(1), 2, 0.0336, team=None, itype="m5.large", gpus=0,
                     spot=True)
    yield database
    database.dispose()


def shape(rep: Report) -> tuple[object, ...]:
    rows = sorted((r.key, r.cost_micros, r.idle_cost_micros, r.spot_cost_micros,
                   r.gpu_seconds, r.idle_gpu_seconds, r.instances) for r in rep.rows)
    t = rep.total
    return (rows, t.cost_micros, t.idle_cost_micros, t.gpu_seconds, t.instances)


PERIODS = [(0, 4), (2, 3), (1, 3), (3, 4), (0, 1)]
GROUPINGS: list[list[str]] = [["team"], ["instance-type", "lifecycle"], [], ["account"]]


def reports(s: Session) -> list[tuple[object, ...]]:
    return [shape(spend(s, by, D0 + a * DAY, D0 + b * DAY))
            for a, b in PERIODS for by in GROUPINGS]


def test_summary_reports_equal_raw_reports_after_partial_then_full_rollup(db: Database) -> None:
    with db.session() as s:
        raw = reports(s)
    with db.session() as s:
        rollup(s, D0 + 2 * DAY)  # days 0-1 summarized, 2-3 still raw: a mixed source
    with db.session() as s:
        assert reports(s) == raw
    with db.session() as s:
        rollup(s, D0 + 4 * DAY)  # the runs that ended on day 1 are extended or not
    with db.session() as s:
        assert reports(s) == raw
        runs = sorted((r.instance_id, r.team, r.first_day, r.last_day)
                      for r in s.exec(select(CostRunRow)))
    assert runs == [
        ("i-1", "research", D0, D0 + DAY), ("i-1", "research", D0 + 3 * DAY, D0 + 3 * DAY),
        ("i-2", "research", D0 + 2 * DAY, D0 + 3 * DAY), ("i-2", "vision", D0, D0 + DAY),
        ("i-3", None, D0 + DAY, D0 + DAY)]


def test_instance_counts_skip_days_an_instance_was_absent(db: Database) -> None:
    with db.session() as s:
        rollup(s, D0 + 4 * DAY)
    with db.session() as s:
        gap = spend(s, ["team"], D0 + 2 * DAY, D0 + 3 * DAY)
        year = spend(s, ["team"], D0, D0 + 4 * DAY)
        research = spend(s, ["instance-type"], D0, D0 + 4 * DAY, {"team": "research"})
    # day 2: only i-2, already re-tagged research; i-1 had no spend that day
    assert [(r.key, r.instances) for r in gap.rows] == [(("research",), 1)]
    assert gap.total.instances == 1
    assert gap.total.cost_micros == round(1.006 * 2 * 1e6)
    assert {r.key: r.instances for r in year.rows} == {
        ("research",): 2, ("vision",): 1, ("unattributed",): 1}
    assert year.total.instances == 3  # i-2 counts once though it carried two teams
    assert {r.key: r.instances for r in research.rows} == {
        ("p4d.24xlarge",): 1, ("g5.xlarge",): 1}


def test_stale_summary_is_not_read_and_is_rebuilt_by_the_next_rollup(db: Database) -> None:
    with db.session() as s:
        rollup(s, D0 + 2 * DAY)
        expected = reports(s)
    with db.session() as s:  # as if the store was upgraded from before the summary tables
        for table in (CostSummaryRow, CostRunRow):
            for row in s.exec(select(table)):
                s.delete(row)
        s.delete(s.get(ControlRow, SUMMARY_UNTIL))
    with db.session() as s:
        assert reports(s) == expected  # read from the daily rows meanwhile
    with db.session() as s:
        rollup(s, D0 + 4 * DAY)
    with db.session() as s:
        assert control.get_time(s, SUMMARY_UNTIL) == D0 + 4 * DAY
        full = reports(s)
        summary = sorted((r.day, str(r.team), r.instance_type, r.cost_micros)
                         for r in s.exec(select(CostSummaryRow)))
        runs = sorted((r.instance_id, r.team, r.first_day, r.last_day)
                      for r in s.exec(select(CostRunRow)))
    with db.session() as s:
        rebuild_summaries(s)
    with db.session() as s:
        assert reports(s) == full
        assert sorted((r.day, str(r.team), r.instance_type, r.cost_micros)
                      for r in s.exec(select(CostSummaryRow))) == summary
        assert sorted((r.instance_id, r.team, r.first_day, r.last_day)
                      for r in s.exec(select(CostRunRow))) == runs
    assert len(summary) == 2 + 3 + 1 + 2  # one row per (day, dimensions) present


def test_reports_by_instance_read_the_daily_rows(db: Database) -> None:
    with db.session() as s:
        raw = shape(spend(s, ["instance"], D0, D0 + 4 * DAY, {"team": "research"}))
        rollup(s, D0 + 4 * DAY)
    with db.session() as s:
        rolled = spend(s, ["instance"], D0, D0 + 4 * DAY, {"team": "research"})
        one = spend(s, ["team"], D0, D0 + 4 * DAY, {"instance": "i-2"})
    assert shape(rolled) == raw
    assert {r.key for r in rolled.rows} == {("i-1",), ("i-2",)}
    assert {r.key: r.instances for r in one.rows} == {("vision",): 1, ("research",): 1}


def rolled_up_as_raw(db: Database, starts: list[datetime], ends: list[datetime]) -> None:
    """Every period from a start to a later end reports the same, by every grouping and by
    instance, once the four days are rolled up as it did from the raw intervals."""
    def periods(s: Session) -> list[tuple[object, ...]]:
        return [shape(spend(s, by, a, b)) for a in starts for b in ends if a < b
                for by in [*GROUPINGS, ["instance"]]]

    with db.session() as s:
        raw = periods(s)
    with db.session() as s:
        rollup(s, D0 + 4 * DAY)
    with db.session() as s:
        assert periods(s) == raw


def test_a_period_starting_inside_a_rolled_up_day_reads_that_day_raw_while_it_is_kept(
        db: Database) -> None:
    # the intervals run 03:00-05:00: a period from 04:00 (one starts before it: not
    # counted) or from 06:00 on day 1 must not count day 1's, as the raw rows say
    cuts = [D0 + DAY + timedelta(hours=4), D0 + DAY + timedelta(hours=6),
            D0 + timedelta(hours=2), D0 + 3 * DAY + timedelta(hours=3)]
    ends = [D0 + 4 * DAY, D0 + DAY + timedelta(hours=8), D0 + 3 * DAY + timedelta(hours=4)]
    rolled_up_as_raw(db, cuts, ends)
    with db.session() as s:
        mid = spend(s, ["team"], D0 + DAY + timedelta(hours=6), D0 + 4 * DAY)
    assert mid.total.instances == 2  # i-1 and i-2 on day 3, i-2 on day 2; not i-3 (day 1)
    # once day 1's raw intervals are pruned, its rollup is all there is: the day is whole
    from costguard.costs.rollup import prune

    with db.session() as s:
        prune(s, D0 + 2 * DAY)
    with db.session() as s:
        widened = spend(s, ["team"], D0 + DAY + timedelta(hours=6), D0 + 4 * DAY)
        whole = spend(s, ["team"], D0 + DAY, D0 + 4 * DAY)
    assert shape(widened) == shape(whole) and widened.total.instances == 3


def test_a_period_ending_inside_a_rolled_up_day_reads_that_day_raw_while_it_is_kept(
        db: Database) -> None:
    # day 1's intervals start at 03:00: a period to 02:00 or 03:00 on day 1 holds none of
    # them, one to 04:00 those starting at 03:00; a period from midnight or from day 0 to
    # such an hour counted day 1 whole once it was rolled up
    starts = [D0, D0 + DAY, D0 + timedelta(hours=4)]
    ends = [D0 + DAY + timedelta(hours=2), D0 + DAY + timedelta(hours=3),
            D0 + DAY + timedelta(hours=4), D0 + 3 * DAY + timedelta(hours=1)]
    rolled_up_as_raw(db, starts, ends)
    with db.session() as s:
        to_two = spend(s, ["team"], D0, D0 + DAY + timedelta(hours=2))
        day_0 = spend(s, ["team"], D0, D0 + DAY)
    assert shape(to_two) == shape(day_0) and to_two.total.instances == 2  # i-1, i-2
    # once day 1's raw intervals are pruned, its rollup is all there is: the day is whole
    from costguard.costs.rollup import prune

    with db.session() as s:
        prune(s, D0 + 2 * DAY)
    with db.session() as s:
        widened = spend(s, ["team"], D0 + DAY, D0 + DAY + timedelta(hours=2))
        whole = spend(s, ["team"], D0 + DAY, D0 + 2 * DAY)
    assert shape(widened) == shape(whole) and widened.total.instances == 3
