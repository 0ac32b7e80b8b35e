"""Cloud TPUs: what an accelerator type (`v5litepod-8`, `v4-32`) or a GKE TPU machine type
(`ct5lp-hightpu-4t`) holds, and its list price, from the shipped `data/tpu_types.json`.

A TPU node's number counts TensorCores on v2, v3, v4 and v5p (two to a chip: `v4-8` is four
chips on one host) and chips on v5e and v6e (`v5litepod-8` is eight chips on one host). A
node is one unit whatever its hosts: the Cloud TPU API stops only single-host nodes, and a
multi-host slice runs one program across all of them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from costguard.model import Instance

_GIB_MIB = 1024
_TYPE = re.compile(r"^(?P<prefix>[a-z0-9]+-)(?P<n>\d{1,7})$")
_GKE = re.compile(r"^(?P<prefix>[a-z0-9]+-[a-z]+-)(?P<n>\d{1,6})t$")
_TOPOLOGY = re.compile(r"^\d{1,6}(x\d{1,6}){0,3}$")
# more chips than any TPU pod holds (the largest are under 10,000): a topology or type name
# that says so is not believed (no node of it is priced or judged by that count)
MAX_CHIPS = 100_000
UNKNOWN_TYPE = "tpu"  # the instance type of a node that names no accelerator type
# any Cloud TPU accelerator type, known generation or not (`v5litepod-8`, `v6e-16`,
# `tpu7x-8`): no Compute Engine machine type starts with v<digit> or tpu<digit>
_ANY_TPU = re.compile(r"^(v\d+[a-z]*|tpu\d+[a-z]*)-\d+$")


@dataclass(frozen=True)
class Generation:
    key: str  # "v5e"
    model: str  # "TPU v5e": what Instance.gpu_model says
    type_prefix: str  # "v5litepod-"
    config_type: str  # acceleratorConfig.type, "V5LITE_POD"
    counts: str | None  # what a type name's number counts: "chips", "tensorcores", None
    tensorcores_per_chip: int
    chips_per_host: int  # of a multi-host slice
    single_host_chips: int  # the most chips one host holds
    hbm_mib_per_chip: int
    gke_machine_prefix: str | None
    usd_per_chip_hour: float | None

    def hosts(self, chips: int) -> int:
        """Host VMs of a slice of `chips` chips."""
        if chips <= self.single_host_chips:
            return 1
        return math.ceil(chips / self.chips_per_host)


@dataclass(frozen=True)
class TpuShape:
    generation: Generation
    chips: int
    hosts: int


@cache
def load_table() -> dict[str, Any]:
    text = resources.files("costguard.providers.gcp").joinpath("data/tpu_types.json")
    table: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return table


@cache
def generations() -> tuple[Generation, ...]:
    return tuple(
        Generation(key=key, model=row["model"], type_prefix=row["type_prefix"],
                   config_type=row["config_type"], counts=row["counts"],
                   tensorcores_per_chip=row["tensorcores_per_chip"],
                   chips_per_host=row["chips_per_host"],
                   single_host_chips=row["single_host_chips"],
                   hbm_mib_per_chip=row["hbm_gib_per_chip"] * _GIB_MIB,
                   gke_machine_prefix=row["gke_machine_prefix"],
                   usd_per_chip_hour=row["usd_per_chip_hour"])
        for key, row in load_table()["generations"].items())


def _generation(prefix: str) -> Generation | None:
    return next((g for g in generations() if g.type_prefix == prefix), None)


def topology_chips(topology: str) -> int | None:
    """`2x2x1` -> 4; None for anything else."""
    if not _TOPOLOGY.match(topology or ""):
        return None
    chips = math.prod(int(d) for d in topology.split("x"))
    return chips if 0 < chips <= MAX_CHIPS else None


def shape(accelerator_type: str, *, topology: str = "", config_type: str = "",
          hosts: int | None = None) -> TpuShape | None:
    """The generation, chips and hosts of a TPU node: from its acceleratorConfig (type and
    topology) where the node has one, else from its accelerator type's name. `hosts`: the
    node's worker endpoints, where it lists them. None: not a TPU type this table knows."""
    gen = next((g for g in generations() if config_type and g.config_type == config_type),
               None)
    m = _TYPE.match(accelerator_type or "")
    if gen is None and m:
        gen = _generation(m["prefix"])
    if gen is None:
        return None
    chips = topology_chips(topology)
    if chips is None and m and gen.counts is not None:
        n = int(m["n"])
        chips = n // gen.tensorcores_per_chip if gen.counts == "tensorcores" else n
    if not chips or chips > MAX_CHIPS:
        return None
    return TpuShape(gen, chips, hosts if hosts and 0 < hosts <= chips else gen.hosts(chips))


def is_tpu_type(accelerator_type: str) -> bool:
    """A Cloud TPU accelerator type (`v5litepod-8`, or one of a generation this table does
    not know yet), never a Compute Engine machine type."""
    return bool(_ANY_TPU.match(accelerator_type or ""))


def from_machine_type(machine_type: str) -> TpuShape | None:
    """A GKE TPU node's Compute Engine machine type (`ct5lp-hightpu-4t`: four v5e chips on
    the VM; one host of whatever slice its node pool makes)."""
    m = _GKE.match(machine_type)
    if not m or not 0 < int(m["n"]) <= MAX_CHIPS:
        return None
    gen = next((g for g in generations() if g.gke_machine_prefix == m["prefix"]), None)
    if gen is None:
        return None
    return TpuShape(gen, int(m["n"]), 1)


def by_model(model: str | None) -> Generation | None:
    """The generation an `Instance.gpu_model` ("TPU v5e") names."""
    return next((g for g in generations() if g.model == model), None)


def list_price(model: str | None, chips: int) -> float | None:
    """On-demand USD per hour of `chips` chips of the generation `model` names (None:
    unknown, never a guess)."""
    gen = by_model(model)
    if gen is None or gen.usd_per_chip_hour is None or chips <= 0:
        return None
    return round(chips * gen.usd_per_chip_hour, 6)


def is_node(instance: Instance) -> bool:
    """An instance listed from the Cloud TPU API (not a Compute Engine VM)."""
    return instance.provider == "gcp" and (is_tpu_type(instance.instance_type)
                                           or instance.instance_type == UNKNOWN_TYPE)
