"""A workload's GPU readings leave the cluster read as rows (k8s/minutes.py), as a cloud's
metric answer does: each checked on its own, one that no reading can hold dropped and
counted, never the whole read; no model is built per GPU-minute on the way."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from costguard.k8s.minutes import NAMES, gpu_minutes, pod_rows
from costguard.k8s.model import Pod, PodKey, Requests
from costguard.k8s.read import PodMinute
from costguard.minute_rows import MinuteRows
from costguard.model import GpuMinute, TelemetrySource
from costguard.providers.cloud_readings import Dropped, validated

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MiB = 2**20


def _pod(name: str, gpus: int, minutes: int, *, mem: int = 4096 * MiB) -> Pod:
    pod = Pod(PodKey("ml", name), requests=Requests(gpus=gpus, gpu_units=gpus, cpu=4))
    pod.readings = [PodMinute(gpu_index=g, minute=T0 + timedelta(minutes=m), span_minutes=1,
                              sm_max=30.0 + m, sm_mean=20.0 + m, util_max=90.0, util_mean=80.0,
                              mem_used_bytes=mem)
                    for m in range(minutes) for g in range(gpus)]
    pod.cpu_used = {(T0 + timedelta(minutes=m)).timestamp(): 2.0 for m in range(minutes)}
    pod.steps = {t: pod.requests for t in pod.cpu_used}
    return pod


def test_a_workloads_readings_are_rows_numbered_across_its_pods(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def _no_model(self: MinuteRows, row: tuple[object, ...]) -> GpuMinute:
        raise AssertionError("a model was built of a row")

    a, b = _pod("a-0", 2, 3), _pod("a-1", 1, 3)
    with monkeypatch.context() as m:
        m.setattr(MinuteRows, "minute", _no_model)
        got = validated(NAMES, pod_rows("k8s:c/ml/Deployment/a", [(2, a), (1, None), (1, b)],
                                        start=(T0 + timedelta(minutes=1)).timestamp(),
                                        end=(T0 + timedelta(minutes=3)).timestamp()), "k8s")
        assert got.names == NAMES
        assert sorted({r[2] for r in got.rows}) == [0, 1, 3]  # the missing pod's GPU kept free
        assert len(got.rows) == 6  # minutes 1 and 2 of three GPUs
    # the host: both pods' CPU, 4 cores used of the 8 they request
    first = next(r for r in got if r.gpu_index == 3 and r.minute == T0 + timedelta(minutes=1))
    assert first == GpuMinute(provider="k8s", instance_id="k8s:c/ml/Deployment/a",
                              gpu_index=3, minute=T0 + timedelta(minutes=1),
                              source=TelemetrySource.DCGM, span_minutes=1, util_mean=80.0,
                              util_max=90.0, sm_mean=21.0, sm_max=31.0,
                              mem_used_bytes=4096 * MiB, host_cpu_pct=50.0, host_cpus=8)


def test_a_reading_no_reading_can_hold_is_dropped_and_counted_not_the_read(
        caplog: pytest.LogCaptureFixture) -> None:
    sane, forged = _pod("ok", 1, 2), _pod("forged", 1, 2, mem=10**30)  # past 2**63 bytes
    dropped = Dropped()
    with caplog.at_level(logging.WARNING):
        got = gpu_minutes("k8s:c/ml/Job/x", [(1, sane), (1, forged)],
                          scope="kubernetes cluster c", dropped=dropped)
    assert dropped.count == 2
    assert [(r.gpu_index, r.minute) for r in got] == [(0, T0), (0, T0 + timedelta(minutes=1))]
    assert "kubernetes cluster c: 2 GPU readings dropped" in caplog.text
    assert "mem_used_bytes" in caplog.text
