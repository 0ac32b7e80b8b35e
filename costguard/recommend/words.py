"""A verdict's words for the accelerator it judged: GPUs by default, TPU chips and HBM for a
Cloud TPU node (with advice about slices), Neuron devices for Trainium and Inferentia. The
kind comes from the accelerator registry (costguard/accelerators.py)."""

from __future__ import annotations

from costguard.accelerators import kind_of, kinds
from costguard.model import Instance
from costguard.telemetry.efficiency import ADVICE, Bottleneck, Words

UNITS = {k.name: k.unit for k in kinds()}  # "TPU chip", "Trainium device": the registry's
TPU_WORDS = Words(unit=UNITS["TPU"], memory="HBM", advice={
    **ADVICE,
    Bottleneck.HEALTHY: "the chips used are busy: keep them",
    Bottleneck.UNUSED_GPUS: "the chips used are busy, but some paid chips did no work: a "
                            "smaller slice of the same generation that holds the work",
    Bottleneck.SATURATED: "TensorCores and host CPU both busy: this job needs more chips, "
                          "not fewer",
    Bottleneck.DATA_LOADING: "the chips wait for their data: feed them faster (more input "
                             "workers, data closer to the host), not a smaller slice",
    Bottleneck.LATENCY_BOUND: "chips and host CPU both mostly waiting: a batch too small or a "
                              "latency-bound server; a smaller slice serves it",
    Bottleneck.CAUSE_UNKNOWN: "chips low, and no host CPU reading to say why: measure the "
                              "host before changing the slice",
    Bottleneck.IDLE: "no chip did work: the idle policy's case",
})


def _neuron(kind: str) -> Words:
    return Words(unit=UNITS[kind], memory="device memory", advice={
        **ADVICE,
        Bottleneck.HEALTHY: "the devices used are busy: keep them",
        Bottleneck.UNUSED_GPUS: "the devices used are busy, but some paid devices did no "
                                f"work: a smaller {kind} size that holds the work",
        Bottleneck.SATURATED: "NeuronCores and host CPU both busy: this job needs more "
                              "hardware, not less",
        Bottleneck.DATA_LOADING: "the devices wait for their data: give them more CPU per "
                                 "device, not a smaller device",
        Bottleneck.LATENCY_BOUND: "devices and host CPU both mostly waiting: a batch too "
                                  f"small or a latency-bound server; a smaller {kind} size "
                                  "serves it",
        Bottleneck.CAUSE_UNKNOWN: "devices low, and no host CPU reading to say why: run the "
                                  "agent (it reads /proc) before changing hardware",
        Bottleneck.IDLE: "no device did work: the idle policy's case",
    })


WORDS: dict[str, Words] = {"TPU": TPU_WORDS, "Trainium": _neuron("Trainium"),
                           "Inferentia": _neuron("Inferentia")}


def words_for(inst: Instance) -> Words | None:
    """The verdict's words for `inst` (None: the default, GPUs)."""
    return WORDS.get(kind_of(inst.instance_type, inst.gpu_count))
