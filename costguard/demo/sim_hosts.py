"""The host beside a simulated GPU (its CPU and memory, as the agent reads them from /proc),
and the underused hosts the demo adds so `costguard recommend` has its cases to show.

Host figures follow what the GPUs are doing, with no randomness, so the seeded fleet stays
as it was: a training run keeps its loaders a third busy, a bursty job or a notebook
barely uses the CPU (latency-bound), an empty box does nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from costguard.demo.sim_fleet import SIM_TYPES, SimHost, gpu_memory_mib
from costguard.model import Instance, InstanceState

GIB = 2**30
# phase -> (host CPU busy %, share of host memory in use)
_HOST_BY_PHASE: dict[str, tuple[float, float]] = {
    "busy": (35.0, 0.25), "bursty": (12.0, 0.10), "held_memory_idle": (2.0, 0.05),
    "tiny_kernels": (20.0, 0.05), "no_process": (1.0, 0.03),
}


def _shape(instance_type: str) -> tuple[int, int]:
    """(vCPUs, host memory bytes) of a simulated type (AWS's shapes)."""
    from costguard.recommend.shapes import aws_shapes

    shape = aws_shapes()[instance_type]
    return shape.vcpus, shape.memory_mib * 2**20


def host_figures(host: SimHost, phase: str) -> dict[str, Any]:
    """The GpuMinute host fields of `host` while its GPUs run `phase`, and its GPUs' memory
    size (the recording's is an H100's)."""
    vcpus, memory = _shape(host.instance.instance_type)
    cpu, mem_share = _HOST_BY_PHASE.get(phase, (5.0, 0.05))
    if host.host_cpu is not None:
        cpu = host.host_cpu
    used = host.host_mem_gib * GIB if host.host_mem_gib is not None else memory * mem_share
    return {"host_cpu_pct": cpu, "host_iowait_pct": 0.5, "host_cpus": vcpus,
            "host_hot_cores": vcpus if cpu >= 90 else 0,
            "host_mem_used_bytes": int(used), "host_mem_total_bytes": memory,
            "mem_total_bytes": (host.instance.gpu_memory_mib or 0) * 2**20 or None}


# name, type, team, owner, the phase of each GPU, host CPU %, host memory GiB in use
_UNDERUSED: tuple[tuple[str, str, str, str, tuple[str, ...], float, float], ...] = (
    ("research-p4d-one-of-eight", "p4d.24xlarge", "research", "ana",
     ("busy",) + ("no_process",) * 7, 3.0, 12.0),
    ("vision-g5-starved-loader", "g5.12xlarge", "vision", "eli", ("bursty",) * 4, 97.0, 48.0),
    ("recsys-g5-small-inference", "g5.12xlarge", "recsys", "ivo",
     ("bursty",) + ("no_process",) * 3, 6.0, 10.0),
)


def underused_hosts(account: str, region: str, first_serial: int, seed: int,
                    launched: datetime) -> list[SimHost]:
    """One GPU of eight busy; four GPUs waiting on a pegged data loader; a 4-GPU box serving
    a small model from one GPU."""
    out = []
    for k, (name, itype, team, owner, phases, cpu, mem) in enumerate(_UNDERUSED):
        gpus, model = SIM_TYPES[itype]
        mem_mib = gpu_memory_mib(itype)
        inst = Instance(
            provider="sim", account=account, region=region, zone=f"{region}b",
            instance_id=f"i-sim{seed:02d}{first_serial + k:06d}", name=name,
            instance_type=itype, state=InstanceState.RUNNING, gpu_count=gpus,
            gpu_model=model, gpu_memory_mib=mem_mib,
            launch_time=launched, observed_at=launched,
            tags={"Name": name, "team": team, "owner": f"{owner}@example.com", "env": "prod"})
        out.append(SimHost(instance=inst, profile="underused", gpu_phases=phases,
                           host_cpu=cpu, host_mem_gib=mem, disk_gib=200))
    return out


def gpu_phase(host: SimHost, phase: str, gpu: int) -> str:
    """The phase GPU `gpu` of `host` runs (an underused host's GPUs differ)."""
    return host.gpu_phases[gpu] if host.gpu_phases is not None else phase
