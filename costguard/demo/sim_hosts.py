"""The host beside a simulated GPU (its CPU and memory, as the agent reads them from /proc),
and the underused hosts the demo adds so `costguard recommend` has its cases to show.

Host figures follow what the GPUs are doing, with no randomness, so the seeded fleet stays
as it was: a training run keeps its loaders a third busy, a bursty job or a notebook
barely uses the CPU (latency-bound), an empty box does nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from costguard.demo.sim_fleet import SIM_TYPES, SimHost, gpu_memory_mib
from costguard.model import Instance, InstanceKind, InstanceState

GIB = 2**30
# phase -> (host CPU busy %, share of host memory in use)
_HOST_BY_PHASE: dict[str, tuple[float, float]] = {
    "busy": (35.0, 0.25), "bursty": (12.0, 0.10), "held_memory_idle": (2.0, 0.05),
    "tiny_kernels": (20.0, 0.05), "no_process": (1.0, 0.03),
}


# the host of a TPU node (accelerator_hosts), which no EC2 table holds: (vCPUs, memory GiB)
# of a v5litepod-8's single host, as GKE lists its ct5lp-hightpu-8t
_TPU_HOST_SHAPES: dict[str, tuple[int, int]] = {"v5litepod-8": (224, 384)}


def _shape(instance_type: str) -> tuple[int, int]:
    """(vCPUs, host memory bytes) of a simulated type: AWS's shapes (GPU and Neuron types,
    the shipped tables; a notebook's ML type its EC2 type's), or a TPU node's host."""
    from costguard.providers.aws.gpu_types import shipped_rows
    from costguard.providers.aws.notebooks import ec2_type

    if instance_type in _TPU_HOST_SHAPES:
        vcpus, gib = _TPU_HOST_SHAPES[instance_type]
        return vcpus, gib * GIB
    row = shipped_rows()[ec2_type(instance_type)]
    return int(row["vcpus"]), int(row["host_memory_mib"]) * 2**20


def host_figures(host: SimHost, phase: str, minute: datetime | None = None) -> dict[str, Any]:
    """The GpuMinute host fields of `host` while its GPUs run `phase` (at `minute`), and its
    GPUs' memory size (the recording's is an H100's)."""
    vcpus, memory = _shape(host.instance.instance_type)
    cpu, mem_share = _HOST_BY_PHASE.get(phase, (5.0, 0.05))
    if host.host_cpu is not None:
        cpu = host.host_cpu
    used = host.host_mem_gib * GIB if host.host_mem_gib is not None else memory * mem_share
    figures = {"host_cpu_pct": cpu, "host_iowait_pct": 0.5, "host_cpus": vcpus,
               "host_hot_cores": vcpus if cpu >= 90 else 0,
               "host_mem_used_bytes": int(used), "host_mem_total_bytes": memory,
               "mem_total_bytes": (host.instance.gpu_memory_mib or 0) * 2**20 or None}
    if host.host_disk_bps is not None and (
            host.disk_until is None or minute is None or minute < host.disk_until):
        figures["host_disk_bps"] = host.host_disk_bps
    return figures


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
        inst = _instance(account, region, f"i-sim{seed:02d}{first_serial + k:06d}", name,
                         itype, team, owner, launched)
        out.append(SimHost(instance=inst, profile="underused", gpu_phases=phases,
                           host_cpu=cpu, host_mem_gib=mem, disk_gib=200))
    return out


# a training job copying its dataset before the first kernel: 8 GPUs held, none working,
# the disk writing 420 MB/s and 3 % of 96 vCPUs busy for its first 14 hours; then the job
# is forgotten, the GPUs still held
WORK_IN_PROGRESS = ("research-p4d-copying-data", "p4d.24xlarge", "research", "ana")
COPY_HOURS = 14


def work_in_progress_hosts(account: str, region: str, first_serial: int, seed: int,
                           launched: datetime) -> list[SimHost]:
    """A host whose GPUs sit idle while its job copies data (idle-but-busy: not stopped),
    and idle once the copy is done (stopped)."""
    name, itype, team, owner = WORK_IN_PROGRESS
    inst = _instance(account, region, f"i-sim{seed:02d}{first_serial:06d}", name, itype, team,
                     owner, launched)
    return [SimHost(instance=inst, profile="forgotten", host_cpu=3.0, host_mem_gib=160.0,
                    host_disk_bps=420e6, disk_until=launched + timedelta(hours=COPY_HOURS),
                    disk_gib=2000)]


# accelerators that are not GPUs, left idle: a TPU v5e node of eight chips (a single-host
# slice: the Cloud TPU API stops it) and a Trainium instance (one device of two NeuronCores)
# name, type, team, owner, accelerator model, accelerators, memory MiB per accelerator
_ACCELERATORS: tuple[tuple[str, str, str, str, str, int, int], ...] = (
    ("nlp-tpu-v5e-dev", "v5litepod-8", "nlp", "gus", "TPU v5e", 8, 16 * 1024),
    ("research-trn1-dev", "trn1.2xlarge", "research", "bo", "AWS Trainium", 1, 32 * 1024),
)


def accelerator_hosts(account: str, region: str, first_serial: int, seed: int,
                      launched: datetime, busy_until: datetime) -> list[SimHost]:
    """A TPU v5e node and a Trainium instance whose jobs end at `busy_until`, then sit idle:
    warned and stopped as idle GPUs are, their spend in their teams' rows."""
    out = []
    for k, (name, itype, team, owner, model, count, memory) in enumerate(_ACCELERATORS):
        inst = Instance(
            provider="sim", account=account, region=region, zone=f"{region}b",
            instance_id=f"i-sim{seed:02d}{first_serial + k:06d}", name=name,
            instance_type=itype, state=InstanceState.RUNNING, gpu_count=count,
            gpu_model=model, gpu_memory_mib=memory, launch_time=launched,
            observed_at=launched,
            tags={"Name": name, "team": team, "owner": f"{owner}@example.com", "env": "dev"})
        out.append(SimHost(instance=inst, profile="finishes", busy_until=busy_until,
                           host_cpu=1.0, host_mem_gib=6.0, disk_gib=100))
    return out


# managed notebooks left open: a SageMaker-style notebook instance whose GPU nobody has used
# since its owner went home (idle: warned, then stopped through its own API), and one whose
# owner trains in it (busy: left alone). name, ML type, team, owner, profile
_NOTEBOOKS: tuple[tuple[str, str, str, str, str], ...] = (
    ("research-notebook-ana", "ml.g5.xlarge", "research", "ana", "forgotten"),
    ("vision-notebook-fay", "ml.g6.xlarge", "vision", "fay", "training"),
)


def notebook_hosts(account: str, region: str, first_serial: int, seed: int,
                   launched: datetime) -> list[SimHost]:
    """Two notebooks of kind `notebook`: one idle (stopped by a notebook policy), one
    busy."""
    from costguard.providers.aws.notebooks import ec2_type

    out = []
    for k, (name, itype, team, owner, profile) in enumerate(_NOTEBOOKS):
        gpus, model = SIM_TYPES[ec2_type(itype)]
        inst = Instance(
            provider="sim", account=account, region=region, zone=f"{region}b",
            instance_id=f"nb-sim{seed:02d}{first_serial + k:06d}", name=name,
            instance_type=itype, state=InstanceState.RUNNING, gpu_count=gpus, gpu_model=model,
            gpu_memory_mib=gpu_memory_mib(ec2_type(itype)), launch_time=launched,
            observed_at=launched, kind=InstanceKind.NOTEBOOK,
            tags={"Name": name, "team": team, "owner": f"{owner}@example.com", "env": "dev"})
        out.append(SimHost(instance=inst, profile=profile, host_cpu=0.5, host_mem_gib=4.0,
                           disk_gib=50))
    return out


def _instance(account: str, region: str, instance_id: str, name: str, itype: str, team: str,
              owner: str, launched: datetime) -> Instance:
    gpus, model = SIM_TYPES[itype]
    return Instance(
        provider="sim", account=account, region=region, zone=f"{region}b",
        instance_id=instance_id, name=name, instance_type=itype,
        state=InstanceState.RUNNING, gpu_count=gpus, gpu_model=model,
        gpu_memory_mib=gpu_memory_mib(itype), launch_time=launched, observed_at=launched,
        tags={"Name": name, "team": team, "owner": f"{owner}@example.com", "env": "prod"})


def gpu_phase(host: SimHost, phase: str, gpu: int) -> str:
    """The phase GPU `gpu` of `host` runs (an underused host's GPUs differ)."""
    return host.gpu_phases[gpu] if host.gpu_phases is not None else phase
