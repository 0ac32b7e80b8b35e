"""`neuron-monitor` reports shaped as AWS's Neuron documentation shows them (the Neuron
Monitor User Guide, aws-neuron/aws-neuron-sdk tools/neuron-sys-tools/
neuron-monitor-user-guide.rst: "The JSON output format", the `neuroncore_counters` and
`memory_used` groups, `instance_info`, `neuron_hardware_info`), and a stand-in for the
program itself: `python -m tests.fakes.neuron_monitor FILE` prints FILE's reports one line
each, a `period` apart, as neuron-monitor streams them (its `-c CONFIG` is taken and
ignored).

These are built from the documented shape, not recorded on a Trainium host (none was
lent): tests/fixtures/neuron/README.md says so.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

CORE_MEMORY = {"constants": 193986816, "model_code": 176285056,
               "model_shared_scratchpad": 0, "runtime_memory": 0, "tensors": 20971520}


def report(*, devices: int = 16, per: int = 2, runtimes: list[dict[str, Any]] | None = None,
           hw_error: str = "", itype: str = "trn1.32xlarge") -> dict[str, Any]:
    return {
        "neuron_runtime_data": runtimes or [],
        "system_data": {},
        "instance_info": {
            "instance_name": "", "instance_id": "i-0011223344556677a",
            "instance_type": itype, "instance_availability_zone": "us-west-2b",
            "instance_availability_zone_id": "usw2-az2", "instance_region": "us-west-2",
            "ami_id": "ami-0011223344556677b", "subnet_id": "subnet-112233ee", "error": ""},
        "neuron_hardware_info": ({"error": hw_error} if hw_error else {
            "neuron_device_count": devices, "neuroncore_per_device_count": per,
            "error": ""}),
    }


def runtime(pid: int, util: dict[int, float], *, tag: str = "", error: str = "",
            period: float = 1.000113182) -> dict[str, Any]:
    """One Neuron application using the NeuronCores `util` names (core index -> %)."""
    return {
        "pid": pid, "address": "", "neuron_runtime_tag": tag or str(pid), "error": "",
        "report": {
            "neuroncore_counters": {
                "period": period,
                "neuroncores_in_use": {str(c): {"neuroncore_utilization": u}
                                       for c, u in util.items()},
                "error": error},
            "memory_used": {
                "period": 1.00001,
                "neuron_runtime_used_bytes": {
                    "host": 6997643264,
                    "neuron_device": len(util) * sum(CORE_MEMORY.values()),
                    "usage_breakdown": {
                        "host": {"application_memory": 6996594688, "constants": 0,
                                 "dma_buffers": 1048576, "tensors": 0},
                        "neuroncore_memory_usage": {str(c): dict(CORE_MEMORY) for c in util},
                    }},
                "loaded_models": [],
                "error": ""},
        },
    }


def stream(lines: list[str], period: float) -> None:
    for line in lines:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
        sys.stdout.flush()
        time.sleep(period)
    while True:  # neuron-monitor runs until it is stopped
        time.sleep(3600)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "-c" in args:  # the agent's configuration: taken, as neuron-monitor takes it
        at = args.index("-c")
        with open(args[at + 1], encoding="utf-8") as config:
            json.load(config)
        del args[at:at + 2]
    with open(args[0], encoding="utf-8") as fh:
        stream(fh.readlines(), float(args[1]) if len(args) > 1 else 0.2)
