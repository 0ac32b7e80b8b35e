"""Zeros written into a busy GPU's Cloud Monitoring series by someone else, or a series of
zeros written beside it, cannot make it idle.

Anyone allowed monitoring.timeSeries.create in a project can add points to any VM's series,
each newer than the series' latest. Written between the Ops Agent's once-a-minute points,
they pull the minute's ALIGN_MEAN down: eleven zeros take a GPU busy at 50 % to 4.2 %, under
an idle threshold of 5 %. Points added can only raise a minute's ALIGN_MAX, and the maximum
decides idleness (each signal is read for both: `metrics.QUERIES`). A series written whole
for a VM that runs no agent is idle evidence only where the policy counts the cloud's
readings (`idle: {evidence: agent}` counts the agent's alone)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import GpuMinute, TelemetrySource
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.metrics import SM_V2, UTIL
from tests.providers.policies import AGENT_EVIDENCE_POLICY, IDLE_NOTIFY_POLICY, idle_cycle


def _diluted(end: datetime, busy: float) -> list[tuple[datetime, float]]:
    """Half an hour of the agent's points, one a minute at `busy`, each followed by eleven
    zeros 5 s apart (what another writer may add)."""
    out: list[tuple[datetime, float]] = []
    for ago in range(30, 0, -1):
        minute = end - timedelta(minutes=ago)
        out.append((minute + timedelta(seconds=1), busy))
        out += [(minute + timedelta(seconds=1 + 5 * k), 0.0) for k in range(1, 12)]
    return out


def _steady(end: datetime, value: float) -> list[tuple[datetime, float]]:
    return [(end - timedelta(minutes=ago) + timedelta(seconds=1), value)
            for ago in range(30, 0, -1)]


def _two_vms(fake: FakeGcp) -> dict[str, str]:
    """A busy and an idle one-GPU VM: name -> instance id."""
    for name in ("busy", "idle"):
        fake.compute.add_instance("ml-prod", "us-central1-a", name, "a2-highgpu-1g",
                                  accelerators=[("nvidia-tesla-a100", 1)])
    return {vm.name: str(vm.id) for vm in fake.compute._vms.values()}


def _cycle(fake: FakeGcp, clock: ManualClock, tmp_path: Path, busy: str
           ) -> tuple[set[str], list[GpuMinute]]:
    provider = GcpProvider(fake.settings(projects=["ml-prod"]), clock=clock)
    try:
        return idle_cycle("gcp", provider, clock, tmp_path, busy)
    finally:
        provider.close()


@pytest.mark.parametrize(("metric", "scale"), [(UTIL, 1.0), (SM_V2, 0.01)])
def test_zeros_added_to_a_busy_gpus_series_do_not_make_it_idle(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path, metric: str, scale: float
) -> None:
    ids = _two_vms(fake)
    now = clock.now().replace(second=0, microsecond=0)
    fake.monitoring.add_gpu_series("ml-prod", metric, ids["busy"],
                                   [(t, v * scale) for t, v in _diluted(now, 50.0)])
    fake.monitoring.add_gpu_series("ml-prod", metric, ids["idle"],
                                   [(t, v * scale) for t, v in _steady(now, 1.0)])
    found, stored = _cycle(fake, clock, tmp_path, ids["busy"])

    assert found == {ids["idle"]}
    minutes = stored
    assert minutes
    mean, peak = ("util_mean", "util_max") if metric == UTIL else ("sm_mean", "sm_max")
    assert {(round(getattr(m, mean), 2), round(getattr(m, peak), 2)) for m in minutes} == {
        (round(50.0 / 12, 2), 50.0)}


@pytest.mark.parametrize("added_first", [True, False])
def test_a_series_added_for_a_busy_gpu_does_not_stand_in_for_the_agents(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path, added_first: bool
) -> None:
    # A series with the same VM and gpu_number but other labels (another uuid): read as one
    # GPU, the last one listed had replaced the other's minutes. The busier reading wins.
    ids = _two_vms(fake)
    now = clock.now().replace(second=0, microsecond=0)
    agents = [lambda: fake.monitoring.add_gpu_series("ml-prod", UTIL, ids["busy"],
                                                     _steady(now, 40.0)),
              lambda: fake.monitoring.add_gpu_series(
                  "ml-prod", UTIL, ids["busy"], _steady(now, 0.0),
                  extra_labels={"uuid": "GPU-forged", "model": "x"})]
    for add in agents[::-1] if added_first else agents:
        add()
    fake.monitoring.add_gpu_series("ml-prod", UTIL, ids["idle"], _steady(now, 1.0))
    found, stored = _cycle(fake, clock, tmp_path, ids["busy"])

    assert found == {ids["idle"]}
    assert {(m.util_mean, m.util_max) for m in stored} == {(40.0, 40.0)}


@pytest.mark.parametrize(("policy", "idle"), [
    (IDLE_NOTIFY_POLICY, {"busy", "idle"}),  # the whole forged series lands
    (AGENT_EVIDENCE_POLICY, {"idle"}),
])
def test_a_series_written_whole_makes_a_vm_idle_only_where_cloud_evidence_counts(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path, policy: str, idle: set[str]
) -> None:
    # "busy" runs no agent: someone writes an idle-looking utilisation series for it, which
    # no aligner tells apart. "idle" has the agent's idle minutes. With `evidence: agent`,
    # only the agent's minutes count: the forged series is stored, and never idle evidence.
    ids = _two_vms(fake)
    now = clock.now().replace(second=0, microsecond=0)
    fake.monitoring.add_gpu_series("ml-prod", UTIL, ids["busy"], _steady(now, 1.0))
    pushed = [GpuMinute(provider="gcp", instance_id=ids["idle"], gpu_index=0,
                        minute=now - timedelta(minutes=ago), source=TelemetrySource.AGENT,
                        samples=60, util_mean=0.5, util_p95=1.0, util_max=1.0)
              for ago in range(30, 0, -1)]
    provider = GcpProvider(fake.settings(projects=["ml-prod"]), clock=clock)
    try:
        found, stored = idle_cycle("gcp", provider, clock, tmp_path, ids["busy"],
                                   policy=policy, agent=pushed)
    finally:
        provider.close()

    names = {v: k for k, v in ids.items()}
    assert {names[i] for i in found} == idle
    assert len(stored) == 30 and {m.source for m in stored} == {
        TelemetrySource.CLOUD_MONITORING}
