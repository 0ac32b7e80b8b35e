"""SQLModel tables. Money is kept in integer micro-dollars so sums are exact to the cent.

Every schema change goes through an Alembic migration in `store/migrations/versions/`, then
`python -m costguard.store.head_snapshot` (a new SQLite store is created from that snapshot of
the migrated schema; tests/store/test_store_head.py fails until it is rewritten).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    Integer,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel

from costguard.store.types import UTCDateTime

# Every row model's config: pydantic builds a model's validator and serializer on its first
# use instead of at import. Rows are made by SQLAlchemy and by their constructors, neither of
# which validates, so most processes never build one: 25 ms less start-up for each of them.
DEFERRED = SQLModel.model_config | {"defer_build": True}


def ts_field(*, nullable: bool = False, index: bool = False) -> Any:
    return Field(default=None, sa_column=Column(UTCDateTime(), nullable=nullable, index=index))


def _json(default: Any) -> Any:
    return Field(default_factory=default, sa_column=Column(JSON, nullable=False))


class AccountRow(SQLModel, table=True):
    model_config = DEFERRED

    __tablename__ = "accounts"

    provider: str = Field(primary_key=True, max_length=16)
    account_id: str = Field(primary_key=True, max_length=128)
    first_seen: datetime = ts_field()
    last_seen: datetime = ts_field()


class InstanceRow(SQLModel, table=True):
    """Latest known state of an instance; `accrued_until` is the cost watermark."""

    model_config = DEFERRED

    __tablename__ = "instances"

    provider: str = Field(primary_key=True, max_length=16)
    instance_id: str = Field(primary_key=True, max_length=128)
    account: str = Field(max_length=128, index=True)
    region: str = Field(max_length=64)
    zone: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, max_length=256)
    instance_type: str = Field(max_length=64)
    state: str = Field(max_length=16, index=True)
    state_reason: str | None = Field(default=None, max_length=256)
    lifecycle: str = Field(max_length=16)
    gpu_count: int = 0
    gpu_model: str | None = Field(default=None, max_length=64)
    gpu_memory_mib: int | None = None
    launch_time: datetime = ts_field()
    tags: dict[str, str] = _json(dict)
    first_seen: datetime = ts_field()
    last_seen: datetime = ts_field()
    state_changed_at: datetime = ts_field()
    accrued_until: datetime | None = ts_field(nullable=True)
    # the state that costs accrue in from `accrued_until` on: the state observed at the last
    # accrual (a change seen later is charged from the poll that sees it), or what we set
    accrue_state: str = Field(default="running", max_length=16)
    gone: bool = False  # no longer listed by its provider
    # AWS instance profile ARN / GCP service account email (Instance.launched_by); 0005
    launched_by: str | None = Field(default=None, max_length=512)
    # the controller that owns it (Instance.owner as JSON; NULL: a pet VM); 0007
    owner: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # the registry kind it is governed as (Instance.kind: instance, notebook); 0019
    kind: str = Field(default="instance", max_length=16,
                      sa_column_kwargs={"server_default": "instance"})


class GpuReadingRow(SQLModel, table=True):
    """One GPU-minute summary (agent push or cloud metrics)."""

    model_config = DEFERRED

    __tablename__ = "gpu_readings"
    __table_args__ = (Index("ix_gpu_readings_minute", "minute"),)

    provider: str = Field(primary_key=True, max_length=16)
    instance_id: str = Field(primary_key=True, max_length=128)
    gpu_index: int = Field(primary_key=True)
    minute: datetime = Field(sa_column=Column(UTCDateTime(), primary_key=True))
    source: str = Field(max_length=24)
    # whole minutes from `minute` this reading stands for (a cloud metric's period)
    span_minutes: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    samples: int = 1
    util_mean: float | None = None
    util_p95: float | None = None
    util_max: float | None = None
    util_active_share: float | None = None
    sm_mean: float | None = None
    sm_p95: float | None = None
    sm_max: float | None = None
    mem_used_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))
    mem_total_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))
    power_w_mean: float | None = None
    process_count: int | None = None
    top_process_pid: int | None = None
    top_process_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))
    # GPM tensor and DRAM activity, and the host's CPU and memory (0011)
    tensor_mean: float | None = None
    dram_bw_mean: float | None = None
    host_cpu_pct: float | None = None
    host_iowait_pct: float | None = None
    host_cpus: int | None = None
    host_hot_cores: int | None = None
    host_mem_used_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))
    host_mem_total_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))
    # power limit and host activity: what checks a signal and corroborates a stop (0015)
    power_limit_w: float | None = None
    host_disk_bps: float | None = None
    host_net_bps: float | None = None
    host_sessions: int | None = None
    host_input_idle_s: float | None = None
    kernels_busy: int | None = None
    kernel_idle_s: float | None = None
    gpu_proc_cpu_pct: float | None = None
    gpu_proc_age_s: float | None = None


class CostIntervalRow(SQLModel, table=True):
    """Cost of one instance over [start, end) in one state, with its attribution then."""

    model_config = DEFERRED

    __tablename__ = "cost_intervals"
    __table_args__ = (
        UniqueConstraint("provider", "instance_id", "start", name="uq_cost_interval_start"),
        Index("ix_cost_intervals_start", "start"),
    )

    id: int | None = Field(default=None, primary_key=True)
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)
    account: str = Field(max_length=128)
    region: str = Field(max_length=64)
    instance_type: str = Field(max_length=64)
    lifecycle: str = Field(max_length=16)
    state: str = Field(max_length=16)
    start: datetime = ts_field()
    end: datetime = ts_field()
    usd_per_hour: float = 0.0
    price_source: str = Field(default="", max_length=128)
    cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    gpu_count: int = 0
    gpu_seconds: int = 0
    idle_gpu_seconds: int = 0
    idle_cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    verdict: str = Field(default="no-data", max_length=16)
    team: str | None = Field(default=None, max_length=128, index=True)
    project: str | None = Field(default=None, max_length=128)
    env: str | None = Field(default=None, max_length=64)
    cost_center: str | None = Field(default=None, max_length=128)


class CycleRow(SQLModel, table=True):
    model_config = DEFERRED

    __tablename__ = "cycles"

    id: int | None = Field(default=None, primary_key=True)
    started_at: datetime = ts_field(index=True)
    finished_at: datetime | None = ts_field(nullable=True)
    status: str = Field(default="running", max_length=16)  # running | ok | failed
    summary: dict[str, Any] = _json(dict)
    error: str | None = None


class GapRow(SQLModel, table=True):
    """A scope that could not be read; alerted once per outage."""

    model_config = DEFERRED

    __tablename__ = "gaps"

    id: int | None = Field(default=None, primary_key=True)
    provider: str = Field(max_length=16)
    scope: str = Field(max_length=256)
    error: str
    first_seen: datetime = ts_field()
    last_seen: datetime = ts_field()
    resolved_at: datetime | None = ts_field(nullable=True)


class FindingRow(SQLModel, table=True):
    model_config = DEFERRED

    __tablename__ = "findings"
    __table_args__ = (Index("ix_findings_policy_instance", "policy", "provider", "instance_id"),)

    id: int | None = Field(default=None, primary_key=True)
    cycle_id: int | None = Field(default=None, index=True)
    policy: str = Field(max_length=128)
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)
    observed_at: datetime = ts_field()
    reason: str
    evidence: str
    usd_per_hour: float = 0.0
    team: str | None = Field(default=None, max_length=128)


class PolicyStateRow(SQLModel, table=True):
    """Where one (policy, instance) pair stands: seen -> warned -> acted | snoozed | cleared."""

    model_config = DEFERRED

    __tablename__ = "policy_states"

    policy: str = Field(primary_key=True, max_length=128)
    provider: str = Field(primary_key=True, max_length=16)
    instance_id: str = Field(primary_key=True, max_length=128)
    state: str = Field(max_length=16)
    since: datetime = ts_field()
    deadline: datetime | None = ts_field(nullable=True)
    snooze_until: datetime | None = ts_field(nullable=True)
    episode: int = 1  # bumps each time the condition starts holding anew
    evidence: str = ""


class ActionJournalRow(SQLModel, table=True):
    """Append-only: intent is written before the provider call, the result after."""

    model_config = DEFERRED

    __tablename__ = "action_journal"
    __table_args__ = (Index("ix_journal_instance", "provider", "instance_id"),)

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(max_length=400, index=True)  # policy|provider|instance|action|episode
    cycle_id: int | None = None
    policy: str = Field(max_length=128)
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)
    action: str = Field(max_length=16)
    dry_run: bool = False
    status: str = Field(max_length=16)  # intent | done | dry-run | skipped | failed | interrupted
    detail: str = ""
    usd_per_hour: float = 0.0
    intent_at: datetime = ts_field(index=True)
    result_at: datetime | None = ts_field(nullable=True)


class AlertRow(SQLModel, table=True):
    """Transactional outbox: written in the same transaction as the state change it reports."""

    model_config = DEFERRED

    __tablename__ = "alerts"

    id: int | None = Field(default=None, primary_key=True)
    dedupe_key: str = Field(max_length=400, unique=True)
    kind: str = Field(max_length=32)  # idle-warning | action | cleared | cap | gap | budget ...
    severity: str = Field(default="info", max_length=16)
    created_at: datetime = ts_field(index=True)
    policy: str | None = Field(default=None, max_length=128)
    provider: str | None = Field(default=None, max_length=16)
    instance_id: str | None = Field(default=None, max_length=128)
    team: str | None = Field(default=None, max_length=128)
    owner: str | None = Field(default=None, max_length=256)
    recipients: list[str] = _json(list)
    subject: str
    body: str
    context: dict[str, Any] = _json(dict)
    status: str = Field(default="pending", max_length=16, index=True)  # pending | sent | failed
    attempts: int = 0
    next_attempt_at: datetime | None = ts_field(nullable=True)
    sent_at: datetime | None = ts_field(nullable=True)
    last_error: str | None = None


class ControlRow(SQLModel, table=True):
    """Small operator switches (kill switch) that must survive restarts."""

    model_config = DEFERRED

    __tablename__ = "control"

    key: str = Field(primary_key=True, max_length=64)
    value: str
    updated_at: datetime = ts_field()


class AgentProofRow(SQLModel, table=True):
    """The last time an agent proved which instance it runs on (POST /v1/identity), for
    `costguard status`'s count of proven agents."""

    model_config = DEFERRED

    __tablename__ = "agent_proofs"

    provider: str = Field(primary_key=True, max_length=16)
    instance_id: str = Field(primary_key=True, max_length=128)
    form: str = Field(max_length=16)  # signature | rsa2048 | pkcs7 | gce-token
    verified_by: str = Field(max_length=200)
    proven_at: datetime = ts_field(index=True)


class StopHookRow(SQLModel, table=True):
    """A pre-stop hook a stop waits on (policy/actions.py `PreStop`): asked of the host's
    agent once per stop (`stop_key`, the stop's journal key, is unique, so a daemon that
    crashes and runs the cycle again finds it and neither skips nor repeats it), delivered
    in the agent's next ingest answer, and resolved by the agent's report or its deadline.
    """

    model_config = DEFERRED

    __tablename__ = "stop_hooks"
    __table_args__ = (Index("ix_stop_hooks_instance", "provider", "instance_id", "status"),)

    id: str = Field(primary_key=True, max_length=32)
    stop_key: str = Field(max_length=400, unique=True)
    policy: str = Field(max_length=128)
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)
    kind: str = Field(max_length=16)  # signal | command
    signal: str | None = Field(default=None, max_length=16)
    timeout_s: int
    status: str = Field(max_length=16)  # requested delivered succeeded failed timed_out skipped
    detail: str = ""
    requested_at: datetime = ts_field()
    deadline: datetime = ts_field()  # no report by then: timed out (the agent died, say)
    delivered_at: datetime | None = ts_field(nullable=True)
    finished_at: datetime | None = ts_field(nullable=True)


class AnomalyRow(SQLModel, table=True):
    """A spend anomaly found by a rule, with its explanation and the operator's feedback."""

    model_config = DEFERRED

    __tablename__ = "anomalies"
    __table_args__ = (
        UniqueConstraint("rule", "value", "bucket_start", name="uq_anomaly_bucket"),
    )

    id: int | None = Field(default=None, primary_key=True)
    rule: str = Field(max_length=128)
    dimension: str = Field(max_length=64)
    value: str = Field(max_length=256)
    granularity: str = Field(max_length=8)  # day | hour
    bucket_start: datetime = ts_field(index=True)
    actual_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    baseline_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    impact_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    explanation: str = ""
    causes: list[dict[str, Any]] = _json(list)
    status: str = Field(default="open", max_length=16)  # open | acked | expected | quiet
    detected_at: datetime = ts_field()
    feedback_at: datetime | None = ts_field(nullable=True)
    # a run of anomalous buckets: bucket_start is its first, last_bucket its latest; ended_at
    # is set when a later bucket of the value came back to normal (None: still going on).
    # actual, baseline and impact are sums over its buckets.
    last_bucket: datetime | None = ts_field(nullable=True)
    ended_at: datetime | None = ts_field(nullable=True)
    buckets: int = Field(default=1, sa_column=Column(Integer, nullable=False,
                                                     server_default="1"))
    alerted_impact_micros: int = Field(default=0, sa_column=Column(
        BigInteger, nullable=False, server_default="0"))  # the impact its last alert said


class StandingRow(SQLModel, table=True):
    """A volume, snapshot or address as last listed (costguard/standing/), and since when
    costguard knows it has been unused (the cloud's word where it gives one, else the first
    listing that showed it unused); reset when something uses it again."""

    model_config = DEFERRED

    __tablename__ = "standing"

    provider: str = Field(primary_key=True, max_length=16)
    resource_id: str = Field(primary_key=True, max_length=128)
    kind: str = Field(max_length=16, index=True)  # volume | snapshot | address
    account: str = Field(max_length=128)
    region: str = Field(max_length=64)
    zone: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, max_length=256)
    state: str = Field(max_length=32)
    in_use: bool = True
    used_by: list[str] = _json(list)
    size_gb: int | None = None
    detail: str = Field(default="", max_length=256)
    created_at: datetime | None = ts_field(nullable=True)
    unused_since: datetime | None = ts_field(nullable=True)
    usd_per_month: float | None = None
    price_source: str = Field(default="", max_length=128)
    tags: dict[str, str] = _json(dict)
    team: str | None = Field(default=None, max_length=128)  # attributed when listed
    first_seen: datetime = ts_field()
    last_seen: datetime = ts_field()
    gone: bool = False  # no longer listed by its provider
    # a reservation's capacity and use (standing.model.Reserved as JSON); 0018
    reservation: dict[str, Any] | None = Field(default=None,
                                               sa_column=Column(JSON, nullable=True))


class ReservationUseRow(SQLModel, table=True):
    """How much of a capacity reservation ran, as one listing saw it: the report sums the
    unused accelerator-hours and dollars of a period from these (standing/reservations.py)."""

    model_config = DEFERRED

    __tablename__ = "reservation_use"

    provider: str = Field(primary_key=True, max_length=16)
    resource_id: str = Field(primary_key=True, max_length=128)
    at: datetime = Field(sa_column=Column(UTCDateTime(), primary_key=True))
    capacity: int
    used: int
    accelerators: int = 0  # per instance
    unit_usd_per_hour: float | None = None
    team: str | None = Field(default=None, max_length=128)
