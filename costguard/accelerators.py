"""The kinds of accelerator costguard governs, one registry: NVIDIA GPUs, Cloud TPUs, AWS
Trainium and Inferentia. An instance's `gpu_count` counts its accelerators whatever their
kind (GPUs, TPU chips, Neuron devices) and the same idle and underused rules judge them;
what differs is named here: the kind's name, what one of them is called, and the instance
types that carry it (matched in Python and, for reports grouped `--by accelerator`, in SQL).

A new kind enters by a row here, not by a branch in every stage. An instance with
accelerators that no row claims is a GPU (the default kind); one with none is "none".
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache

from sqlalchemy import ColumnElement, case, func, literal, or_


@dataclass(frozen=True)
class AcceleratorKind:
    name: str  # what reports show: "TPU"
    unit: str  # one of them: "TPU chip"
    type_patterns: tuple[str, ...]  # instance types that carry it (shell patterns)


GPU = AcceleratorKind("GPU", "GPU", ())
NONE = "none"


@cache
def kinds() -> tuple[AcceleratorKind, ...]:
    """The kinds other than GPUs, most specific first."""
    from costguard.providers.gcp import tpus

    tpu_patterns = sorted({f"{g.type_prefix}*" for g in tpus.generations()}
                          | {f"{g.gke_machine_prefix}*" for g in tpus.generations()
                             if g.gke_machine_prefix} | {"tpu*"})
    return (
        AcceleratorKind("TPU", "TPU chip", tuple(tpu_patterns)),
        AcceleratorKind("Trainium", "Trainium device", ("trn*",)),
        AcceleratorKind("Inferentia", "Inferentia device", ("inf*",)),
    )


def kind_of(instance_type: str, accelerators: int) -> str:
    """The accelerator kind's name of an instance of `instance_type` with `accelerators`."""
    if accelerators <= 0:
        return NONE
    name = instance_type.lower()  # as SQL's lower() reads it: every database alike
    for kind in kinds():
        if any(fnmatchcase(name, p) for p in kind.type_patterns):
            return kind.name
    return GPU.name


def counted(instance_type: str, accelerators: int) -> str:
    """`accelerators` as a person counts them: "8 TPU chips", "1 GPU", "no accelerator"."""
    if accelerators <= 0:
        return "no accelerator"
    name = kind_of(instance_type, accelerators)
    unit = next((k.unit for k in kinds() if k.name == name), GPU.unit)
    return f"{accelerators} {unit}{'s' if accelerators != 1 else ''}"


def kind_column(instance_type: ColumnElement[str],
                accelerators: ColumnElement[int]) -> ColumnElement[str]:
    """`kind_of` as a SQL expression over an instance type and an accelerator count."""
    whens: list[tuple[ColumnElement[bool], str]] = [(_none_of(accelerators), NONE)]
    for kind in kinds():
        lowered = func.lower(instance_type)
        like = [lowered.like(p.replace("*", "%")) for p in kind.type_patterns]
        whens.append((or_(*like), kind.name))
    return case(*whens, else_=literal(GPU.name))


def _none_of(accelerators: ColumnElement[int]) -> ColumnElement[bool]:
    """No accelerators (a NULL count is none too)."""
    return or_(accelerators.is_(None), accelerators <= 0)
