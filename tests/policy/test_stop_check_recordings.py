"""The stop's decision on every recorded host (tests/fixtures/host) under the default policy:
the GPU idle for 45 minutes (the real H100 recording's held-memory phase), the host's last
minutes as the agent recorded them. Only the hosts where nothing is in progress are stopped:
the idle box, and the notebook whose kernel nobody has touched for 17 minutes (past the
default 15, as a notebook culler's timeout); every kind of work in progress is idle-but-busy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from costguard.model import GpuMinute, Instance, InstanceState, TelemetrySource
from costguard.policy.evaluate import evaluate
from costguard.policy.load import parse_policy_text
from costguard.policy.stop_check import held_back, judge
from costguard.telemetry.activity import read_recording, replay
from costguard.telemetry.summary import phase_profiles, summarize

HOST = Path(__file__).resolve().parents[1] / "fixtures" / "host"
POLICY = parse_policy_text("""\
policies:
  - name: idle-gpu-shutdown
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
""", "default.yml").policies[0]
STOPPED = {"idle", "notebook_idle_kernel"}
HELD = {"dataset_copy", "dataset_download", "checkpoint_write", "cpu_preprocessing",
        "notebook_recent_input"}


def window(name: str) -> tuple[list[GpuMinute], datetime]:
    """45 idle GPU-minutes ending at the recording's last minute, the recorded host's
    figures on the minutes it covers."""
    lines = (HOST / f"{name}.jsonl").read_text().splitlines()
    host = {datetime.fromtimestamp(m, UTC): {**h, **g.get(0, {})}
            for m, h, g in replay(read_recording(lines))}
    end = max(host) + timedelta(minutes=1)
    idle = phase_profiles()["held_memory_idle"]
    minutes = []
    for k in range(45):
        at = end - timedelta(minutes=45 - k)
        samples = idle[(k * 20) % (len(idle) - 20):][:20]
        minutes.append(summarize(samples, provider="aws", instance_id="i-rec", gpu_index=0,
                                 minute=at, source=TelemetrySource.AGENT,
                                 host=host.get(at, {})))
    return minutes, end


def instance(now: datetime) -> Instance:
    return Instance(provider="aws", account="1", region="us-east-1", instance_id="i-rec",
                    instance_type="p5.48xlarge", state=InstanceState.RUNNING, gpu_count=1,
                    launch_time=now - timedelta(days=2), observed_at=now)


def test_every_recording_is_judged_and_none_is_left_out() -> None:
    assert {p.stem for p in HOST.glob("*.jsonl")} == STOPPED | HELD


@pytest.mark.parametrize("name", sorted(STOPPED | HELD))
def test_only_the_hosts_with_nothing_in_progress_are_stopped(name: str) -> None:
    minutes, end = window(name)
    found = evaluate(POLICY, instance(end), minutes, end, 98.32)
    assert found is not None and found.holds, found  # idle on the GPUs, every one of them
    judged = judge(found, minutes, end)
    if name in STOPPED:
        assert judged.holds, judged.reason
        assert "host quiet (last 10 min)" in judged.reason
    else:
        assert not judged.holds and held_back(judged), judged.reason
        assert judged.reason.startswith("idle-but-busy: host busy (last 10 min): ")
