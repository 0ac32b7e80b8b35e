"""The NVML sampler against a fake pynvml that raises pynvml's own NVMLError classes."""

from __future__ import annotations

import io
from itertools import count

import pynvml
import pytest

from costguard.telemetry.nvml import NvmlSampler, NvmlUnavailable
from costguard.telemetry.trace import TraceWriter, parse_trace
from tests.telemetry.fake_nvml import FakeGpu, FakeNvml


def sampler_for(nvml: FakeNvml, **kw: object) -> NvmlSampler:
    ticks = count()
    return NvmlSampler(nvml, clock=lambda: 1_800_000_000.0 + next(ticks), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (pynvml.NVMLError_LibraryNotFound, "NVML Shared Library Not Found"),
        (pynvml.NVMLError_DriverNotLoaded, "Driver Not Loaded"),
        (pynvml.NVMLError_NoPermission, "Insufficient Permissions"),
    ],
)
def test_no_driver_is_a_clear_error_that_says_what_to_install(error, says):  # type: ignore[no-untyped-def]
    sampler = sampler_for(FakeNvml([FakeGpu()], init_error=error))
    with pytest.raises(NvmlUnavailable) as info:
        sampler.open()
    message = str(info.value)
    assert says in message
    assert "Install the NVIDIA driver" in message
    assert "costguard agent replay" in message


def test_every_gpu_is_sampled_with_processes_and_sm_activity_from_gpm():
    busy = FakeGpu(
        util=97, mem_used=21_000_000_000, processes=[(4412, 20_000_000_000)], sm_util=92.5
    )
    idle = FakeGpu()
    nvml = FakeNvml([busy, idle])
    with sampler_for(nvml) as sampler:
        first = sampler.sample()
        second = sampler.sample()
    assert [s.gpu for s in first] == [0, 1]
    # the first tick opens the GPM window; the second reads SM activity across it
    assert first[0].gpm is None and "gpm" not in first[0].errors
    assert second[0].sm_active == pytest.approx(92.5)
    assert second[0].gpm is not None and second[0].gpm["sm_occupancy"] == pytest.approx(46.25)
    assert second[1].sm_active == 0.0
    assert second[0].util_gpu == 97
    assert second[0].mem_used == 21_000_000_000
    assert second[0].processes is not None and second[0].processes[0].pid == 4412
    assert second[0].process_util is not None and second[0].process_util[0].sm == 97
    assert second[1].process_util is None  # NVML's NotFound when no process ran
    assert second[1].errors["process_util"] == "NVMLError_NotFound: Not Found"
    assert second[0].t == first[0].t + 1
    assert "nvmlShutdown" in nvml.calls


def test_unsupported_fields_become_none_and_the_rest_is_still_read():
    gpu = FakeGpu(
        util=40,
        gpm_supported=False,
        refuse={
            "power": pynvml.NVMLError_NotSupported,
            "temperature": pynvml.NVMLError_NotSupported,
        },
    )
    with sampler_for(FakeNvml([gpu])) as sampler:
        assert sampler.header["gpm_supported"] is False
        (s,) = sampler.sample()
        (s,) = sampler.sample()
    assert s.power_mw is None and s.temp_c is None
    assert s.errors["power_mw"] == "NVMLError_NotSupported: Not Supported"
    assert s.util_gpu == 40
    assert s.gpm is None and s.sm_active is None  # no GPM on this GPU: util_gpu fallback later


def test_a_gpu_lost_mid_run_is_recorded_and_the_other_gpus_keep_reporting():
    lost, healthy = FakeGpu(util=50, sm_util=40.0), FakeGpu(util=10, sm_util=8.0)
    nvml = FakeNvml([lost, healthy])
    with sampler_for(nvml) as sampler:
        sampler.sample()
        lost.lost = True  # falls off the bus between ticks
        after = [sampler.sample() for _ in range(3)]
        assert sampler.lost == {0: "NVMLError_GpuIsLost: GPU is lost"}
    for tick in after:
        gone, ok = tick
        assert gone.gpu == 0 and gone.errors["device"] == "NVMLError_GpuIsLost: GPU is lost"
        assert gone.util_gpu is None and gone.mem_used is None and gone.gpm is None
        assert ok.util_gpu == 10 and ok.sm_active == pytest.approx(8.0)
    # once lost, the sampler stops poking the device: only the healthy GPU is queried
    with sampler_for(nvml) as again:
        lost.lost = False
        again.sample()
        lost.lost = True
        again.sample()
        before = nvml.calls.count("utilization")
        again.sample()
        again.sample()
        assert nvml.calls.count("utilization") - before == 2


def test_mig_slices_are_reported_one_by_one_with_gpm_per_gpu_instance():
    not_supported = {"utilization": pynvml.NVMLError_NotSupported}
    slices = [
        FakeGpu(
            gpu_instance_id=1, sm_util=60.0, refuse=not_supported, processes=[(7, 5_000_000_000)]
        ),
        FakeGpu(gpu_instance_id=2, sm_util=0.0, refuse=not_supported),
    ]
    parent = FakeGpu(mig_mode=[1, 1], mig_slices=slices)
    with sampler_for(FakeNvml([parent])) as sampler:
        assert sampler.device_indexes == [100, 101]
        sampler.sample()
        a, b = sampler.sample()
    assert (a.gpu, b.gpu) == (100, 101)
    assert a.sm_active == pytest.approx(60.0) and b.sm_active == 0.0
    assert a.util_gpu is None and a.errors["util_gpu"].startswith("NVMLError_NotSupported")
    assert a.processes is not None and a.processes[0].pid == 7


def test_samples_round_trip_through_the_trace_format():
    gpu = FakeGpu(util=3, processes=[(9, 1_000)], refuse={"clock": pynvml.NVMLError_NotSupported})
    out = io.StringIO()
    with sampler_for(FakeNvml([gpu])) as sampler:
        writer = TraceWriter(out, sampler.header)
        written = [s for _ in range(3) for s in sampler.sample()]
        for s in written:
            writer.write(s)
    trace = parse_trace(out.getvalue().splitlines())
    assert trace.header["name"] == "NVIDIA H100 80GB HBM3"
    assert trace.samples == written
