"""condition.outside_hours through check_condition: the office-hours answer is worked out
once per (calendar, time) and is the same as asking the schedule each time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.actions.schedule import in_office_hours, why_outside
from costguard.model import Instance, InstanceState
from costguard.policy.conditions import Condition
from costguard.policy.evaluate import check_condition
from costguard.policy.schedule import OfficeHours

BERLIN = OfficeHours(timezone="Europe/Berlin", hours="08:00-19:00", days="mon-fri",
                     holidays="DE")
TOKYO = OfficeHours(timezone="Asia/Tokyo", hours="09:00-18:00", days="mon-fri")


def _inst(iid: str) -> Instance:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    return Instance(provider="aws", account="1", region="eu-central-1", instance_id=iid,
                    instance_type="g5.xlarge", state=InstanceState.RUNNING, gpu_count=1,
                    launch_time=now - timedelta(days=1), observed_at=now)


@pytest.mark.parametrize("when", [
    datetime(2026, 12, 25, 10, 0, tzinfo=UTC),  # Christmas Day in Berlin, a Friday
    datetime(2026, 12, 28, 10, 0, tzinfo=UTC),  # Monday 11:00 Berlin, 19:00 Tokyo
    datetime(2026, 12, 28, 2, 0, tzinfo=UTC),   # Monday 03:00 Berlin, 11:00 Tokyo
    datetime(2026, 12, 26, 12, 0, tzinfo=UTC),  # Saturday
])
def test_each_instance_gets_the_schedules_answer_for_its_calendar_and_time(
    when: datetime,
) -> None:
    for hours in (BERLIN, TOKYO, BERLIN):
        cond = Condition(outside_hours=hours)
        for iid in ("i-1", "i-2"):
            holds, reasons, verdict = check_condition(cond, _inst(iid), [], when, 1.0)
            assert verdict is None
            if in_office_hours(hours, when):
                assert (holds, reasons) == (False, ["inside office hours"])
            else:
                assert holds
                assert reasons == ["outside office hours: " + why_outside(hours, when)]


def test_the_answer_follows_the_clock() -> None:
    cond = Condition(outside_hours=BERLIN)
    monday = datetime(2026, 12, 28, 10, 0, tzinfo=UTC)  # 11:00 in Berlin
    assert not check_condition(cond, _inst("i-1"), [], monday, 1.0)[0]
    assert check_condition(cond, _inst("i-1"), [], monday + timedelta(hours=9), 1.0)[1] == [
        "outside office hours: 20:00 in Europe/Berlin, outside 08:00-19:00"]
    assert not check_condition(cond, _inst("i-1"), [], monday, 1.0)[0]
