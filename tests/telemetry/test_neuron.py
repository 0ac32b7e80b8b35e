"""AWS Trainium and Inferentia through neuron-monitor: its reports (in the shape of AWS's
Neuron documentation, tests/fixtures/neuron/) read per Neuron device, the program run as a
child process whose stream the agent samples, and the minutes judged by the same
classifier as a GPU's: busy, idle with no Neuron application, no data on an error."""

from __future__ import annotations

import json
import os
import stat
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from costguard.model import Verdict
from costguard.telemetry import commands
from costguard.telemetry.classify import classify
from costguard.telemetry.neuron import (
    STALE_AFTER,
    NeuronMonitorSampler,
    NeuronUnavailable,
    parse_report,
    samples_of,
)
from costguard.telemetry.nvml import NvmlUnavailable
from costguard.telemetry.summary import summarize
from tests.fakes.neuron_monitor import CORE_MEMORY, report, runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron"
REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def _lines(name: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def test_a_busy_trainium_host_reads_as_sixteen_devices_of_two_cores() -> None:
    busy = _lines("trn1-32xlarge.jsonl")[0]
    r = parse_report(busy, 1.0)
    assert (r.devices, r.cores_per_device, r.error) == (16, 2, None)
    assert r.instance_type == "trn1.32xlarge"
    cores = busy["neuron_runtime_data"][0]["report"]["neuroncore_counters"][  # type: ignore[index]
        "neuroncores_in_use"]
    for device in range(16):  # each device's mean over its two NeuronCores
        mine = [cores[str(2 * device + c)]["neuroncore_utilization"] for c in (0, 1)]
        assert r.util[device] == pytest.approx(sum(mine) / 2)
        assert r.memory[device] == 2 * sum(CORE_MEMORY.values())
        assert [(p.pid, p.used_bytes) for p in r.processes[device]] == [
            (4242, 2 * sum(CORE_MEMORY.values()))]


def test_no_neuron_application_is_a_real_reading_every_device_at_zero() -> None:
    r = parse_report(_lines("trn1-32xlarge.jsonl")[-1], 1.0)
    assert r.error is None and set(r.util.values()) == {0.0}
    assert all(p == () for p in r.processes.values())
    samples = samples_of(r, 1.0, range(16))  # type: ignore[arg-type]
    assert {(s.util_gpu, s.mem_used, s.processes) for s in samples} == {(0, 0, ())}


def test_applications_sharing_a_device_and_errors_that_are_no_data() -> None:
    shared, counters_error, no_driver = _lines("inf2-xlarge.jsonl")
    r = parse_report(shared, 1.0)
    assert r.util == {0: pytest.approx((35.5 + 4.25) / 2)}
    assert [p.pid for p in r.processes[0]] == [101, 102]
    for doc in (counters_error, no_driver):
        bad = parse_report(doc, 1.0)
        assert bad.error is not None
        (s,) = samples_of(bad, 1.0, [0])
        assert s.util_gpu is None and s.processes is None and "neuron" in s.errors
    assert "driver is not loaded" in (parse_report(no_driver, 1.0).error or "")


@pytest.mark.parametrize("doc", [
    [], "x", {"neuron_hardware_info": {"neuron_device_count": True,
                                       "neuroncore_per_device_count": 2}},
    {"neuron_hardware_info": {"neuron_device_count": -3, "neuroncore_per_device_count": 2}},
    report(devices=1, runtimes=[{"pid": "x", "report": "nope"}]),
])
def test_a_malformed_report_is_no_data_never_a_crash(doc: object) -> None:
    assert parse_report(doc, 1.0).error is not None


def test_odd_values_are_bounded_or_left_out() -> None:
    doc = report(devices=1, per=2, runtimes=[runtime(7, {0: 150.0, 1: float("nan"), 9: 50.0})])
    doc["neuron_runtime_data"][0]["report"]["memory_used"]["neuron_runtime_used_bytes"][
        "usage_breakdown"]["neuroncore_memory_usage"]["0"]["tensors"] = -5
    r = parse_report(json.loads(json.dumps(doc)), 1.0)
    # core 0 clamped to 100, core 1's NaN no reading (0), core 9 past the one device
    assert r.util == {0: 50.0}
    assert r.memory[0] == 2 * sum(CORE_MEMORY.values()) - CORE_MEMORY["tensors"]


def test_a_stale_report_is_no_data() -> None:
    r = parse_report(_lines("trn1-32xlarge.jsonl")[0], 100.0)
    fresh = samples_of(r, 100.0 + STALE_AFTER, [0])[0]
    stale = samples_of(r, 101.0 + STALE_AFTER, [0])[0]
    assert fresh.util_gpu is not None and stale.util_gpu is None
    assert "no report from neuron-monitor for 11 s" in stale.errors["neuron"]


def _minutes(lines: list[dict[str, object]]) -> list[object]:
    """Each report held for a minute of 1 Hz samples, summarized as the agent does."""
    out = []
    for k, doc in enumerate(lines):
        t0 = (T0 + timedelta(minutes=k)).timestamp()
        r = parse_report(doc, t0)
        per_device: dict[int, list[object]] = {}
        for second in range(60):
            for s in samples_of(r, t0 + second, list(range(r.devices or 16))):
                per_device.setdefault(s.gpu, []).append(s)
        for device, samples in per_device.items():
            out.append(summarize(samples, provider="aws",  # type: ignore[arg-type]
                                 instance_id="i-0011223344556677a", gpu_index=device,
                                 minute=T0 + timedelta(minutes=k)))
    return out


def test_the_classifier_judges_neuron_minutes_as_it_judges_a_gpu_s() -> None:
    lines = _lines("trn1-32xlarge.jsonl")
    busy, stalled, empty = lines[:5], lines[5:10], lines[10:]

    def verdict(phase: list[dict[str, object]]) -> Verdict:
        minutes = _minutes(phase)
        return classify(minutes, window_start=T0,  # type: ignore[arg-type]
                        window_end=T0 + timedelta(minutes=len(phase)), gpu_count=16,
                        below=5.0).verdict

    assert verdict(busy) is Verdict.ACTIVE
    assert verdict(stalled) is Verdict.IDLE  # a core in eight at 2.9 %: below 5 % peak
    assert verdict(empty) is Verdict.IDLE  # no Neuron application at all
    errors = _lines("inf2-xlarge.jsonl")[1:]
    minutes = _minutes(errors)
    assert classify(minutes, window_start=T0,  # type: ignore[arg-type]
                    window_end=T0 + timedelta(minutes=2), gpu_count=1,
                    below=5.0).verdict is Verdict.NO_DATA


def _fake_monitor(tmp_path: Path, fixture: str, period: float = 0.05) -> list[str]:
    """A `neuron-monitor` that streams the fixture (a real child process)."""
    script = tmp_path / "neuron-monitor"
    script.write_text(f"#!/bin/sh\ncd {REPO}\nexec {sys.executable} -m "
                      f"tests.fakes.neuron_monitor {FIXTURES / fixture} {period} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return [str(script)]


def test_the_sampler_runs_neuron_monitor_and_samples_its_latest_report(
        tmp_path: Path) -> None:
    with NeuronMonitorSampler(_fake_monitor(tmp_path, "trn1-32xlarge.jsonl")) as sampler:
        assert sampler.device_indexes == list(range(16))
        assert sampler.header["instance_type"] == "trn1.32xlarge"
        first = sampler.sample()
        assert len(first) == 16 and all(s.util_gpu is not None for s in first)
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(s.util_gpu for s in sampler.sample()):
            time.sleep(0.05)  # the stream reaches its reports with no application
        last = sampler.sample()
        assert {s.util_gpu for s in last} == {0} and all(s.processes == () for s in last)
    assert sampler._proc is not None and sampler._proc.poll() is not None  # stopped


def test_a_host_whose_driver_is_not_loaded_is_refused_with_why(tmp_path: Path) -> None:
    only_error = tmp_path / "error.jsonl"
    only_error.write_text((FIXTURES / "inf2-xlarge.jsonl").read_text().splitlines()[-1] + "\n")
    script = tmp_path / "neuron-monitor"
    script.write_text(f"#!/bin/sh\ncd {REPO}\nexec {sys.executable} -m "
                      f"tests.fakes.neuron_monitor {only_error} 0.05 \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(NeuronUnavailable, match="driver is not loaded"):
        NeuronMonitorSampler([str(script)]).open()
    with pytest.raises(NeuronUnavailable, match="cannot run"):
        NeuronMonitorSampler([str(tmp_path / "absent")]).open()


def test_the_agent_reads_neuron_devices_where_nvml_does_not_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _fake_monitor(tmp_path, "trn1-32xlarge.jsonl")[0]
    os.replace(script, tmp_path / "neuron-monitor")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    def no_driver(*args: object, **kw: object) -> None:
        raise NvmlUnavailable("NVML Shared Library Not Found")

    monkeypatch.setattr(commands.NvmlSampler, "__init__", no_driver)
    sampler = commands.open_sampler("auto", lambda: 0.0)
    try:
        assert isinstance(sampler, NeuronMonitorSampler) and len(sampler.device_indexes) == 16
    finally:
        sampler.close()
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        commands.open_sampler("nvidia", lambda: 0.0)  # asked for NVIDIA: no fallback
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("costguard.telemetry.neuron.INSTALLED_AT", str(tmp_path / "none"))
    with pytest.raises(NvmlUnavailable, match=r"neuron-monitor .* is not installed either") as err:
        commands.open_sampler("auto", lambda: 0.0)
    message = str(err.value)  # said once: the reason, then the fix
    assert message.count("cannot read the GPUs through NVML") == 1
    assert message.count("Install the NVIDIA driver") == 1


def test_neuron_monitor_is_found_where_the_neuron_tools_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service's PATH (systemd's) has no /opt/aws/neuron/bin: it is looked for there too."""
    from costguard.telemetry import neuron

    tools = tmp_path / "opt-aws-neuron-bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(neuron, "INSTALLED_AT", str(tools))
    assert NeuronMonitorSampler.find() is None and not NeuronMonitorSampler.available()
    os.replace(_fake_monitor(tmp_path, "trn1-32xlarge.jsonl")[0], tools / "neuron-monitor")
    assert NeuronMonitorSampler.find() == str(tools / "neuron-monitor")
    with NeuronMonitorSampler() as sampler:  # no command given: the one found
        assert sampler.command == [str(tools / "neuron-monitor")]
        assert len(sampler.device_indexes) == 16


def test_bad_lines_among_good_reports_are_skipped_never_a_crash(tmp_path: Path) -> None:
    """A line that is not JSON, one holding a 5,000-digit number and one cut short sit
    among good reports: each is skipped (and logged), the good ones are read."""
    good = (FIXTURES / "trn1-32xlarge.jsonl").read_text().splitlines()
    busy, empty = good[0], good[-1]
    stream = tmp_path / "mixed.jsonl"
    stream.write_text("\n".join([
        busy, "not json {", '{"neuron_hardware_info": {"neuron_device_count": ' + "9" * 5000
        + ', "neuroncore_per_device_count": 2, "error": ""}}', busy[: len(busy) // 2],
        empty]) + "\n")
    script = tmp_path / "neuron-monitor"
    script.write_text(f"#!/bin/sh\ncd {REPO}\nexec {sys.executable} -m "
                      f"tests.fakes.neuron_monitor {stream} 0.05 \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    import time

    with NeuronMonitorSampler([str(script)]) as sampler:
        assert len(sampler.device_indexes) == 16  # from the first good report
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(s.util_gpu for s in sampler.sample()):
            time.sleep(0.05)  # on to the last good report: no application, all at 0
        assert {s.util_gpu for s in sampler.sample()} == {0}
        assert sampler._proc is not None and sampler._proc.poll() is None  # still reading
