"""Settings of the simulated cloud (kept apart from sim.py so config imports stay light)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimSettings(BaseModel):
    """A seeded GPU fleet in memory: the demo and the tests run costguard end to end on it."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 7
    instances: int = Field(default=48, ge=1, le=20000)
    accounts: list[str] = Field(default_factory=lambda: ["111111111111", "222222222222"])
    regions: list[str] = Field(default_factory=lambda: ["us-east-1", "us-west-2", "eu-west-1"])
    # new instances appearing over time; at most the largest seeded fleet a day (infinity
    # launched without end)
    launches_per_day: float = Field(default=4.0, ge=0, le=20000)
    # an Auto Scaling group and a GKE-like node pool beside the seeded fleet (`costguard demo`
    # turns them on): members a controller owns, never stopped as if they were alone
    managed_groups: bool = False
    # three underused GPU hosts beside the seeded fleet (`costguard demo` turns them on):
    # one busy GPU of eight, a starved data loader, a small model on a 4-GPU box
    underused_hosts: bool = False
    # a GPU host whose GPUs sit idle while its job copies a dataset to disk (`costguard demo`
    # turns it on): idle waste, never stopped (idle-but-busy, docs/actions.md)
    work_in_progress_hosts: bool = False
    # an idle TPU v5e node and an idle Trainium instance beside the seeded fleet (`costguard
    # demo` turns them on): accelerators that are not GPUs, judged and stopped as GPUs are
    accelerator_hosts: bool = False
    # two managed notebooks (kind `notebook`), one left idle and one in use (`costguard demo`
    # turns them on): governed by `resource: notebook` policies
    notebook_hosts: bool = False
    # volumes, snapshots and an address that bill while nothing runs (`costguard demo` turns
    # them on): demo/sim_standing.py
    standing: bool = False
    # the fleet's working week runs this many hours ahead of UTC (office hours are 9-18 of
    # it, Monday to Friday): the demo sets it so that it always starts at the same hour of
    # the fleet's week, and a seed tells the same story whatever the day
    week_shift_hours: int = Field(default=0, ge=0, lt=7 * 24)
