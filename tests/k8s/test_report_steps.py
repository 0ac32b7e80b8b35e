"""A report's step grows with the GPUs it reads, so that no read outgrows its bound: the
finest step that holds the period's figures, hourly at the coarsest, and a period too
long for hourly steps refused with how long a period would do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.config import Settings
from costguard.k8s import report as kube
from costguard.k8s.provider import LiveCluster
from costguard.k8s.report import KubeReportError, read_report, report_step
from costguard.k8s.settings import ClusterSettings
from costguard.report.run import catalog_for
from tests.k8s.history import History

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(("days", "devices", "minutes"), [
    (7, 18, 5),  # a small cluster's week: 5-minute steps
    (0.5, 5_000, 15),  # 12 h: 144 steps x 40,000 figures is 5.8 M; 48 at 15 min: 1.9 M
    (2, 1_000, 15),  # 576 steps at 5 minutes would be 4.6 M figures; 192 at 15: 1.5 M
    (7, 1_000, 60),  # a week of a thousand GPUs: hourly
    (60, 10, 10),  # past 30 days: the finest step within 8,640 steps
    (90, 10, 15),
])
def test_the_finest_step_that_holds_the_figures(days: float, devices: int,
                                                minutes: int) -> None:
    step = report_step(T0, T0 + timedelta(days=days), devices)
    assert step == timedelta(minutes=minutes)
    steps = (timedelta(days=days) / step)
    assert steps * devices * kube.FIGURES_PER_DEVICE <= kube.MAX_POINTS_PER_READ
    if minutes > 5:  # and the next finer step would not have held them
        finer = kube.STEPS[kube.STEPS.index(step) - 1]
        over = (timedelta(days=days) / finer) * devices * kube.FIGURES_PER_DEVICE
        assert over > kube.MAX_POINTS_PER_READ or timedelta(days=days) / finer > kube.MAX_STEPS


def test_a_period_too_long_for_hourly_steps_is_refused_with_the_period_that_fits() -> None:
    with pytest.raises(KubeReportError) as err:
        report_step(T0, T0 + timedelta(days=30), 10_000)
    assert "10,000 GPU devices over 30 days" in str(err.value)
    assert "ask for at most 1.04 days at a time" in str(err.value)


def _cfg(history: History) -> ClusterSettings:
    return ClusterSettings(name="ml-prod", prometheus_url=history.url,
                           namespace_teams={"serving": "platform"}, owner_team="platform")


def test_the_devices_are_counted_from_prometheus(history: History) -> None:
    # node A: 8 GPUs; node B: two MIG instances and 7 GPUs; node C: 1
    assert LiveCluster(_cfg(history)).devices(history.start, history.end) == 18


def test_a_report_of_more_devices_than_5_minute_steps_hold_reads_coarser_steps(
        history: History, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = catalog_for(Settings())
    fine = read_report([_cfg(history)], ("namespace",), history.start, history.end, {},
                       catalog=catalog, inventory=[])
    # as if the cluster were large: 18 devices x 8 figures x 36 steps (3 h at 5 minutes)
    # is 5,184; hold 3 h only at hourly steps
    monkeypatch.setattr(kube, "MAX_POINTS_PER_READ", 18 * 8 * 3)
    coarse = read_report([_cfg(history)], ("namespace",), history.start, history.end, {},
                         catalog=catalog, inventory=[])
    assert (fine.step, coarse.step) == (timedelta(minutes=5), timedelta(hours=1))

    def total(r: kube.ClusterReport) -> float:
        return sum(cl.cost_micros for _, cl in r.rows()) / 1e6

    assert total(coarse) == pytest.approx(total(fine), rel=0.02)
    verdicts = {cl.pod: cl.verdicts for cl in coarse.lines}
    assert verdicts["notebook-alice-0"] == {"idle": 3}
    assert verdicts["train-llm-x7k2p"] == {"active": 3}
