"""Accelerator count, model and memory per EC2 instance type: NVIDIA GPUs (GpuInfo), and
AWS Trainium and Inferentia devices (NeuronInfo), which the agent reads through
neuron-monitor and costguard judges as it judges GPUs.

DescribeInstanceTypes is the source; it is asked once per type (batched 100 types a call) and
cached, in the store too where the daemon gives the provider one (a restart does not ask
again). Types it does not know (retired ones such as p3.2xlarge are missing from some
API data) fall back to the shipped table `data/gpu_types.json`; that a region did not know
a type is remembered too, for UNDESCRIBED_FOR, then asked again.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from costguard.providers.aws.boundary import aws_call, error_code, error_message

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

_BATCH = 100  # DescribeInstanceTypes accepts at most 100 InstanceTypes per call
UNDESCRIBED_FOR = timedelta(days=7)  # a region that did not know a type is asked again after
_MISSING = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class GpuSpec:
    count: int
    model: str | None
    memory_mib: int | None  # per GPU
    host_memory_mib: int | None = None  # the instance's (MemoryInfo), where known

    @classmethod
    def none(cls) -> GpuSpec:
        return cls(0, None, None)


@cache
def shipped_rows() -> dict[str, dict[str, Any]]:
    """The shipped tables' rows by type: GPU types (`gpu_types.json`) and Neuron types
    (`neuron_types.json`), each row's source in its file."""
    out: dict[str, dict[str, Any]] = {}
    for name in ("data/gpu_types.json", "data/neuron_types.json"):
        text = resources.files("costguard.providers.aws").joinpath(name).read_text()
        out.update(json.loads(text)["types"])
    return out


@cache
def shipped_gpu_table() -> dict[str, GpuSpec]:
    """The shipped tables' accelerators by type (`shipped_rows`)."""
    return {itype: GpuSpec(_device_count(int(row["count"])), str(row["model"]),
                           int(row["memory_mib"]), _mib(row.get("host_memory_mib")))
            for itype, row in shipped_rows().items()}


# the most MiB whose bytes a reading holds (its byte columns are 64-bit): a larger figure in
# an answer is no figure, not a GPU reading refused for its host's memory
_MAX_MIB = (2**63 - 1) // 2**20


def _mib(value: Any) -> int | None:
    """A size in MiB as given (an answer's or a stored copy's): a positive int within
    `_MAX_MIB`, else none."""
    return value if type(value) is int and 0 < value <= _MAX_MIB else None


def _neuron_spec(info: dict[str, Any]) -> GpuSpec:
    """Trainium and Inferentia: NeuronInfo's devices (chips), "AWS Trainium" and the like,
    and one device's memory."""
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if not devices:
        return GpuSpec.none()
    first = devices[0]
    name = first.get("Name")
    return GpuSpec(sum(int(d.get("Count", 0)) for d in devices),
                   f"AWS {name}" if name else None,
                   first.get("MemoryInfo", {}).get("SizeInMiB"), _host_mib(info))


def _host_mib(info: dict[str, Any]) -> int | None:
    """The instance type's memory (DescribeInstanceTypes' `MemoryInfo.SizeInMiB`)."""
    return _mib((info.get("MemoryInfo") or {}).get("SizeInMiB"))


def spec_from_type_info(info: dict[str, Any]) -> GpuSpec:
    gpu_info = info.get("GpuInfo")
    if not gpu_info or not gpu_info.get("Gpus"):
        return _neuron_spec(info)
    gpus = gpu_info["Gpus"]
    first = gpus[0]
    model = " ".join(p for p in (first.get("Manufacturer"), first.get("Name")) if p) or None
    memory = first.get("MemoryInfo", {}).get("SizeInMiB")
    return GpuSpec(_device_count(sum(int(g.get("Count", 0)) for g in gpus)), model, memory,
                   _host_mib(info))


def _device_count(count: int) -> int:
    """A fractional-GPU type (g6f, gr6f: an eighth to a half of an L4) lists its GPU with
    Count 0 and the memory of its share: it has one (partial) GPU device, which the agent
    sees and idle detection must judge, not none."""
    return max(count, 1)


class GpuTypeCatalog:
    """Thread-safe cache of GpuSpec by instance type.

    A type's GPUs are the same in every region, so what one region's DescribeInstanceTypes
    answered serves them all (regions are read concurrently; the first to ask describes, the
    others wait for it). A type a region could not describe falls back to the shipped table
    for that region only: another region may still know it.
    """

    def __init__(self, today: Callable[[], date] = date.today) -> None:
        self._lock = threading.Lock()
        self._describing = threading.Lock()
        self._today = today
        self._known: dict[str, GpuSpec] = {}
        self._undescribed: dict[tuple[str, str], date] = {}  # (region, type) -> when said
        self.calls = 0  # DescribeInstanceTypes calls made (tests check the batching)

    def undescribed(self) -> dict[str, dict[str, str]]:
        """The types each region's DescribeInstanceTypes did not know, and since when
        (ISO dates), as JSON."""
        out: dict[str, dict[str, str]] = {}
        with self._lock:
            for (region, itype), since in sorted(self._undescribed.items()):
                out.setdefault(region, {})[itype] = since.isoformat()
        return out

    def learn_undescribed(self, doc: dict[str, Any]) -> None:
        """Take what an earlier run's `undescribed` wrote: those types fall back to the
        shipped table in their region without asking, until UNDESCRIBED_FOR has passed
        since the region said so. A malformed entry is skipped (asked again)."""
        oldest = self._today() - UNDESCRIBED_FOR
        taken: dict[tuple[str, str], date] = {}
        for region, types in doc.items():
            if not isinstance(types, dict):
                continue
            for itype, since in types.items():
                try:
                    when = date.fromisoformat(str(since))
                except ValueError:
                    continue
                if when > oldest:
                    taken[(str(region), str(itype))] = when
        with self._lock:
            self._undescribed.update(taken)

    def known(self) -> dict[str, dict[str, Any]]:
        """What DescribeInstanceTypes answered, as JSON (the shipped table's fallbacks are
        not: another region may still describe the type; `undescribed` says which region
        did not)."""
        with self._lock:
            return {t: {"count": s.count, "model": s.model, "memory_mib": s.memory_mib,
                        "host_memory_mib": s.host_memory_mib, "neuron": True}
                    for t, s in sorted(self._known.items())}

    def learn(self, known: dict[str, Any]) -> None:
        """Take what an earlier run's `known` wrote. A malformed entry is skipped (it is
        asked for again), never trusted."""
        taken: dict[str, GpuSpec] = {}
        for name, row in known.items():
            if isinstance(row, dict) and ("neuron" not in row or "host_memory_mib" not in row):
                # written before NeuronInfo was read (a trn1 stored as no GPU), or before the
                # type's memory was kept: asked again, once
                continue
            try:
                memory = row["memory_mib"]
                model = row["model"]
                spec = GpuSpec(int(row["count"]), None if model is None else str(model),
                               None if memory is None else int(memory),
                               _mib(row.get("host_memory_mib")))
            except (KeyError, TypeError, ValueError):
                continue
            taken[str(name)] = spec
        with self._lock:
            self._known.update(taken)

    def host_memory_mib(self, instance_type: str) -> int | None:
        """The type's memory: as DescribeInstanceTypes answered, else the shipped table's."""
        with self._lock:
            known = self._known.get(instance_type)
        if known is not None and known.host_memory_mib is not None:
            return known.host_memory_mib
        shipped = shipped_gpu_table().get(instance_type)
        return shipped.host_memory_mib if shipped is not None else None

    def _cached(self, region: str, instance_type: str) -> GpuSpec | None:
        known = self._known.get(instance_type)
        if known is not None or (region, instance_type) not in self._undescribed:
            return known
        # the region did not describe it: the shipped table's entry (none: no GPU known)
        return shipped_gpu_table().get(instance_type) or GpuSpec.none()

    def resolve(self, ec2: EC2Client, region: str, types: set[str]) -> dict[str, GpuSpec]:
        with self._describing:
            with self._lock:
                wanted = sorted(t for t in types if self._cached(region, t) is None)
            found: dict[str, GpuSpec] = {}
            for start in range(0, len(wanted), _BATCH):
                found.update(self._describe(ec2, region, wanted[start : start + _BATCH]))
        with self._lock:
            self._known.update(found)
            today = self._today()
            for t in wanted:
                if t not in found:
                    self._undescribed[(region, t)] = today
            out: dict[str, GpuSpec] = {}
            for t in types:
                spec = self._cached(region, t)
                assert spec is not None
                out[t] = spec
            return out

    def _describe(self, ec2: EC2Client, region: str, batch: list[str]) -> dict[str, GpuSpec]:
        out: dict[str, GpuSpec] = {}
        while batch:
            try:
                with self._lock:
                    self.calls += 1
                page = ec2.describe_instance_types(InstanceTypes=batch)  # type: ignore[arg-type]
            except ClientError as exc:
                # One unknown type fails the whole call; the message names them all.
                unknown = _unknown_types(exc)
                if not unknown or not unknown & set(batch):
                    with aws_call(f"{region}/describe-instance-types"):
                        raise
                batch = [t for t in batch if t not in unknown]
                continue
            for info in page["InstanceTypes"]:
                out[info["InstanceType"]] = spec_from_type_info(dict(info))
            return out
        return out


def _unknown_types(exc: ClientError) -> set[str]:
    if error_code(exc) != "InvalidInstanceType":
        return set()
    match = _MISSING.search(error_message(exc))
    return {t.strip() for t in match.group(1).split(",")} if match else set()
