"""When a considered instance is a finding: `condition:` and its parts."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from costguard.model import PERCENT_GRID
from costguard.policy.base import Duration, Element, OneOrMany, Text, at_least
from costguard.policy.schedule import OfficeHours

MIN_IDLE_WINDOW = timedelta(minutes=5)
MIN_UNDERUSED_WINDOW = timedelta(days=1)
# the verdicts under which an instance can be underused (docs/recommend.md)
UnderusedBottleneck = Literal["healthy", "unused-gpus", "saturated", "data-loading",
                              "latency-bound", "cause-unknown"]


class HostActivity(Element):
    """What counts as work in progress on a host whose GPUs look idle (docs/agent.md "Host
    activity"). Read over the last `recent` of the idle window from the agent's host
    figures (CPU also from the cloud's metrics where no agent runs). Any one of them makes
    the instance *idle-but-busy*: still reported as waste, but a stop or scale-in is held
    back unless the action says `when_host_busy: stop`.

    The defaults were measured on host recordings made with the agent's own reader
    (tests/fixtures/host, docs/agent.md): an idle host sits far below every one of them,
    and each recorded kind of work in progress crosses at least one.
    """

    yaml_key: ClassVar[str] = "condition.idle.host"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-shutdown
    filters: {gpu: true, state: running}
    condition:
      idle:
        below: 5
        for: 45m
        host: {recent: 10m, hot_cores: 1, disk_mb_s: 20, net_mb_s: 10, input_within: 15m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m, when_host_busy: hold}
"""

    recent: Annotated[Duration, AfterValidator(at_least(timedelta(minutes=1), "a minute is "
                      "the agent's finest figure"))] = Field(
        default=timedelta(minutes=10),
        description="How much of the end of the idle window the host figures are read over.")
    hot_cores: float = Field(
        default=1.0, gt=0,
        description="Busy when this many cores are each kept 90% busy or more in any "
        "minute: a single-threaded step pegs one, whatever the host's size.")
    cpu_cores: float = Field(
        default=4.0, gt=0,
        description="Busy when the host's CPUs do this many cores' worth of work (mean); "
        "above the background of daemons on a large host.")
    cpu_pct: float = Field(
        default=50.0, gt=0, le=100,
        description="Busy when all cores together are this busy (percent, mean); the one CPU "
        "figure the cloud's metrics give.")
    process_cpu_pct: float = Field(
        default=50.0, gt=0,
        description="Busy when the processes holding a GPU use this much CPU (percent of one "
        "core, mean): a job loading data or compiling before its first kernel.")
    process_started_within: Duration = Field(
        default=timedelta(minutes=10),
        description="Busy when a process holding a GPU started this recently (a job starting).")
    disk_mb_s: float = Field(
        default=20.0, gt=0,
        description="Busy when disk reads and writes reach this in any minute (MB/s).")
    net_mb_s: float = Field(
        default=10.0, gt=0,
        description="Busy when network traffic reaches this in any minute (MB/s).")
    input_within: Duration = Field(
        default=timedelta(minutes=15),
        description="Busy when someone typed in a logged-in terminal, or a Jupyter kernel "
        "ran, this recently.")


class IdleCondition(Element):
    """The instance's GPUs stayed below a utilisation threshold for a whole window.

    `signal` picks the measurement: `sm_active` is the share of SM cycles doing work
    (NVML GPM on Hopper and later, DCGM `SM_ACTIVE`); `util_gpu` is the share of time any
    kernel ran, which a trivial kernel loop keeps at 100 %; `auto` uses SM activity where
    the GPU reports it and `util_gpu` elsewhere. Every GPU of the instance must stay below
    `below` percent for the whole `for` window, and telemetry must cover at least
    `min_coverage` of the window's GPU-minutes. Missing data never counts as idle.
    """

    yaml_key: ClassVar[str] = "condition.idle"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-shutdown
    filters: {gpu: true, state: running}
    condition:
      idle:
        signal: auto
        below: 5
        for: 45m
        min_coverage: 0.8
        missing_data: not-idle
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
"""

    signal: Literal["auto", "sm_active", "util_gpu"] = Field(
        default="auto", description="Which GPU measurement decides."
    )
    below: float = Field(
        default=5, gt=0, le=100,
        description="Idle means below this percentage (0-100], to a hundredth of a point."
    )
    for_: Annotated[
        Duration,
        AfterValidator(
            at_least(MIN_IDLE_WINDOW, "shorter windows mistake pauses between jobs for idle")
        ),
    ] = Field(default=timedelta(minutes=45), alias="for", description="Window length, >= 5m.")
    min_coverage: float = Field(
        default=0.8, ge=0, le=1, description="Share of the window that must have data (0-1)."
    )
    missing_data: Literal["not-idle"] = Field(
        default="not-idle", description="What a gap in telemetry means; always `not-idle`."
    )
    evidence: Literal["any", "agent"] = Field(
        default="any",
        description="Whose readings can show the instance idle: `any` (costguard's agent's, "
        "or the cloud's GPU metrics where no agent runs) or `agent` (only the agent's: the "
        "cloud's metrics, which any host allowed to write metrics can write for any "
        "instance, are then never idle evidence; pair with `http.identity.mode: required`).",
    )
    host: HostActivity = Field(
        default_factory=HostActivity,
        description="What host activity holds a stop back (work in progress: see below).")

    @field_validator("missing_data", mode="before")
    @classmethod
    def _missing_is_never_idle(cls, value: Any) -> Any:
        return missing_is_never_idle(value)

    @field_validator("below")
    @classmethod
    def _below_on_the_grid(cls, value: float) -> float:
        return on_the_grid(value)

    @property
    def window(self) -> timedelta:
        """The `for` duration (a Python keyword, hence the attribute name)."""
        return self.for_


class UnderusedCondition(Element):
    """The instance's GPUs work, but much less than it pays for: some paid GPUs unused, or
    the GPUs used below `gpu_low` on average, over a window of days. The efficiency verdict
    decides (docs/recommend.md): judged once per `recommend.refresh` (a day) from the
    window's readings, with its bottleneck (data-loading, latency-bound, ...) and the
    cheaper type that would fit. Thresholds left out come from `recommend:` in
    costguard.yaml. An instance not judged yet, with too few readings, or idle is never
    underused (idle is the `idle` condition's case).

    Only `notify` and `tag` may act on it: a GPU that does some work is never stopped for
    doing too little. `bottleneck` narrows it to some verdicts (a latency-bound server, a
    starved data loader); `min_monthly_savings_usd` to instances whose cheaper fit saves at
    least that much.
    """

    yaml_key: ClassVar[str] = "condition.underused"
    example: ClassVar[str] = """\
policies:
  - name: underused-gpus
    filters: {gpu: true, state: running}
    condition:
      underused:
        window: 7d
        gpu_low: 40
        bottleneck: [latency-bound, data-loading, healthy]
        min_monthly_savings_usd: 500
    actions:
      - notify: {to: owner}
      - tag: {set: {"costguard:underused": "{now}"}, overwrite: false}
"""

    window: Annotated[
        Duration,
        AfterValidator(at_least(MIN_UNDERUSED_WINDOW,
                                "a verdict needs at least a day of readings")),
    ] | None = Field(default=None,
                     description="Readings judged, >= 1d (default: recommend.window, 7d).")
    gpu_low: float | None = Field(
        default=None, gt=0, le=100,
        description="GPUs used below this mean percent are low (default: recommend.gpu_low, 40).")
    cpu_high: float | None = Field(
        default=None, gt=0, le=100,
        description="Host CPU p95 at or above this is high (default: recommend.cpu_high, 75).")
    bottleneck: OneOrMany[UnderusedBottleneck] | None = Field(
        default=None, description="Only these verdicts (default: any underused one).")
    min_monthly_savings_usd: float = Field(
        default=0, ge=0, description="Only when a cheaper fit saves at least this per month.")

    def overrides(self) -> dict[str, Any]:
        """The thresholds this condition sets, as `recommend:` settings."""
        return {name: value for name, value in (("window", self.window),
                                                ("gpu_low", self.gpu_low),
                                                ("cpu_high", self.cpu_high))
                if value is not None}


class UnusedCondition(Element):
    """A volume, snapshot or address that nothing running uses, for at least `for`
    (`resource: volume | snapshot | address` only). A volume is unused while it is attached
    to nothing, or only to instances that are stopped; a snapshot while no image, launch
    template or volume refers to it and no lifecycle service (Data Lifecycle Manager, AWS
    Backup) manages it; an address while it is associated with nothing, or only with a
    stopped instance. The clock starts when the cloud says the resource stopped being used,
    where it says (a persistent disk's last detach), else when costguard first saw it
    unused: time costguard did not see is never counted."""

    yaml_key: ClassVar[str] = "condition.unused"
    example: ClassVar[str] = """\
policies:
  - name: old-unused-snapshots
    resource: snapshot
    filters: {age: {older_than: 90d}}
    condition:
      unused: {for: 30d}
    actions:
      - notify: {to: team}
"""

    for_: Annotated[Duration, AfterValidator(at_least(timedelta(hours=1), "a resource "
                                                      "detached a moment ago may be reattached"))
                    ] = Field(default=timedelta(days=30), alias="for",
                              description="Unused for at least this long.")


class CostOver(Element):
    """The instance's running cost is above a threshold. Give exactly one of
    `usd_per_hour` or `usd_per_day` (a day is 24 running hours)."""

    yaml_key: ClassVar[str] = "condition.cost_over"
    example: ClassVar[str] = """\
policies:
  - name: expensive-instances
    filters: {state: running}
    condition:
      cost_over: {usd_per_hour: 10}
    actions:
      - notify: {to: [owner, "slack:#ml-costs"]}
"""

    usd_per_hour: float | None = Field(default=None, gt=0, description="Hourly threshold.")
    usd_per_day: float | None = Field(default=None, gt=0, description="Daily threshold.")

    @model_validator(mode="after")
    def _exactly_one(self) -> CostOver:
        hourly_threshold(self.usd_per_hour, self.usd_per_day)
        return self

    @property
    def hourly_usd(self) -> float:
        """The threshold as dollars per running hour."""
        return hourly_threshold(self.usd_per_hour, self.usd_per_day)


class Condition(Element):
    """What makes a considered instance a finding. Give at least one condition; every
    condition given must hold (AND).

    `running_longer_than` counts from the instance's last launch or start;
    `missing_tags` holds when any listed tag key is absent; `outside_hours` holds at
    night, on weekends and on holidays of its calendar.
    """

    yaml_key: ClassVar[str] = "condition"
    example: ClassVar[str] = """\
policies:
  - name: long-running-untagged
    filters: {gpu: true, state: running}
    condition:
      running_longer_than: 24h
      missing_tags: [team, owner]
      cost_over: {usd_per_day: 200}
    actions:
      - notify: {to: "slack:#ml-costs"}
"""

    idle: IdleCondition | None = Field(default=None, description="GPU idleness.")
    underused: UnderusedCondition | None = Field(
        default=None, description="GPUs that work, but far less than paid for.")
    running_longer_than: Duration | None = Field(
        default=None, description="Running for longer than this."
    )
    missing_tags: OneOrMany[Text] | None = Field(
        default=None, description="Any of these tag keys is absent."
    )
    cost_over: CostOver | None = Field(default=None, description="Cost above a threshold.")
    outside_hours: OfficeHours | None = Field(
        default=None, description="Outside these office hours."
    )
    unused: UnusedCondition | None = Field(
        default=None, description="Volumes, snapshots, addresses: nothing running uses it.")

    @model_validator(mode="after")
    def _at_least_one(self) -> Condition:
        at_least_one([getattr(self, name) for name in type(self).model_fields],
                     self.missing_tags)
        return self


# The rules of the validators above, as plain functions (mutation testing reaches these;
# it does not mutate decorated methods).

def missing_is_never_idle(value: Any) -> Any:
    if value != "not-idle":
        raise PydanticCustomError(
            "missing_data",
            f"missing_data must be 'not-idle' (got {value!r}): costguard never treats "
            "missing telemetry as idle, because a GPU that stopped reporting may still "
            "be working; lower min_coverage instead if data is sparse",
        )
    return value


def hourly_threshold(usd_per_hour: float | None, usd_per_day: float | None) -> float:
    """`cost_over` as dollars per running hour; exactly one of the two must be given."""
    if usd_per_hour is not None and usd_per_day is None:
        return usd_per_hour
    if usd_per_day is not None and usd_per_hour is None:
        return usd_per_day / 24
    raise PydanticCustomError("cost_over", "give exactly one of usd_per_hour or usd_per_day")


def on_the_grid(value: float) -> float:
    """A threshold readings are compared with: readings are held and kept to a hundredth of
    a point, rounded down (the reading window, the settled blocks), which compares the same
    as the reading only against a threshold on that grid. Between two grid points (4.995),
    a reading of 4.996 kept as 4.99 would be below it: idle where the GPU was not."""
    if round(value * PERCENT_GRID) / PERCENT_GRID != value:
        raise PydanticCustomError(
            "grid",
            "a threshold is given to a hundredth of a point (readings are kept to a hundredth, "
            "rounded down, and one between two hundredths could then look idle): "
            "use {near}", {"near": " or ".join(
                f"{q / PERCENT_GRID:g}"
                for q in (math.floor(value * PERCENT_GRID), math.ceil(value * PERCENT_GRID))
                if q > 0)})
    return value


def at_least_one(values: list[Any], missing_tags: tuple[str, ...] | None) -> None:
    if all(value is None for value in values):
        raise PydanticCustomError(
            "condition",
            "give at least one condition: idle, underused, running_longer_than, "
            "missing_tags, cost_over or outside_hours",
        )
    if missing_tags == ():
        raise PydanticCustomError(
            "condition", "missing_tags needs at least one tag key, e.g. [team]"
        )


def underused_acts_only_by_telling(underused: object, kinds: set[str]) -> None:
    """`underused:` is acted on by notify and tag only (never stop or the other steps)."""
    if underused is None:
        return
    acting = sorted(kinds - {"notify", "tag"})
    if acting:
        raise PydanticCustomError(
            "actions",
            f"condition.underused works with notify and tag only, not {', '.join(acting)}: "
            "costguard never stops a GPU for doing too little (it may be serving or "
            "training); remove " + ", ".join(f"`{k}`" for k in acting),
        )
