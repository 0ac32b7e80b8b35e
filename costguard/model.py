"""Domain values shared by every stage: frozen pydantic models, no behaviour beyond helpers.

Providers produce `Instance` and `GpuMinute` values; the store persists them; policies read
them. Everything is timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

# k8s: a Kubernetes cluster's GPU workloads (costguard/k8s), governed beside instances
ProviderName = Literal["aws", "gcp", "sim", "k8s"]
INT32 = 2**31 - 1  # what the store's INTEGER columns hold (agents must get a 422, not a 503)
INT64 = 2**63 - 1
PROVIDERS: tuple[ProviderName, ...] = ("aws", "gcp", "sim")
# hours in a month, as the clouds price by the month (730 = 8,760 / 12)
HOURS_PER_MONTH = 730


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"


class Lifecycle(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    # an EC2 Capacity Block for ML (`InstanceLifecycle: capacity-block`) or a VM in a GCE
    # calendar-mode reservation (`RESERVATION_BOUND`): GPU capacity bought ahead for days or
    # weeks, paid for whether it runs or not; no spot candidate
    CAPACITY_BLOCK = "capacity-block"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Each pydantic model carries the set of field names it was given (`model_fields_set`): ~730
# bytes an Instance, of ~1.5 KB. Models given the same fields share one set object
# (`SharesFieldsSet`). Safe because they are frozen: nothing adds to a set in place
# (`model_copy(update=...)` copies the set before adding to it).
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
_MAX_FIELDS_SETS = 256  # distinct combinations kept (a handful in practice)


def _shared_fields_set(given: set[str]) -> set[str]:
    key = frozenset(given)
    shared = _FIELDS_SETS.get(key)
    if shared is not None:
        return shared
    if len(_FIELDS_SETS) < _MAX_FIELDS_SETS:
        _FIELDS_SETS.setdefault(key, given)
    return given


class SharesFieldsSet(BaseModel):
    """A frozen model whose instances, built or copied, share their fields-set with every
    other given the same fields (`_shared_fields_set`). For models a process holds by the
    thousand: an inventory's instances through a cycle, the daemon's held verdicts
    (`costguard.telemetry.efficiency.Efficiency`: a set of ~20 names is ~2.2 KB, over half
    a held verdict). Frozen, so nothing adds to the shared set in place."""

    model_config = ConfigDict(frozen=True)

    def model_post_init(self, context: Any, /) -> None:
        object.__setattr__(self, "__pydantic_fields_set__",
                           _shared_fields_set(self.__pydantic_fields_set__))

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Self:
        """pydantic's copy, sharing its fields-set as a built one does (a copy's own set
        was ~730 bytes of each Instance an inventory or the simulated cloud keeps)."""
        copied = super().model_copy(update=update, deep=deep)
        object.__setattr__(copied, "__pydantic_fields_set__",
                           _shared_fields_set(copied.__pydantic_fields_set__))
        return copied


class InstanceKey(Frozen):
    """Identifies one instance across providers and accounts."""

    provider: ProviderName
    instance_id: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.instance_id}"


class OwnerKind(StrEnum):
    """The controllers that own instances. A member of one is never stopped or terminated
    as if it were alone: the controller would replace it (an Auto Scaling group or a managed
    instance group) or lose work it scheduled there (a cluster)."""

    ASG = "asg"  # EC2 Auto Scaling group
    MIG = "mig"  # GCE managed instance group (zonal or regional)
    EKS = "eks"  # EKS managed node group or self-managed EKS/Kubernetes nodes
    KARPENTER = "karpenter"  # a Karpenter NodePool's node
    GKE = "gke"  # GKE node pool
    EMR = "emr"
    BATCH = "batch"  # AWS Batch compute environment
    EC2_FLEET = "ec2-fleet"
    SPOT_FLEET = "spot-fleet"
    PARALLELCLUSTER = "parallelcluster"
    RAY = "ray"
    SKYPILOT = "skypilot"
    DATAPROC = "dataproc"
    GCP_BATCH = "gcp-batch"
    VERTEX = "vertex"
    # a Cloud TPU node a queued resource created: deleting the queued resource is how it goes
    TPU_QUEUED_RESOURCE = "tpu-queued-resource"
    # a multi-host TPU slice: one program across its hosts, and the Cloud TPU API stops
    # single-host nodes only; it is deleted whole or left running, never stopped in part
    TPU_SLICE = "tpu-slice"
    UNKNOWN = "unknown"  # a system tag says a service manages it, and costguard doesn't know which

    @property
    def kubernetes(self) -> bool:
        """A Kubernetes node: draining it is the cluster autoscaler's job, never costguard's."""
        return self in (OwnerKind.EKS, OwnerKind.KARPENTER, OwnerKind.GKE)

    @property
    def scalable(self) -> bool:
        """costguard can shrink the group by this member (`scale_in`)."""
        return self in (OwnerKind.ASG, OwnerKind.MIG)


# how a person reads an owner kind where its value would puzzle (the rest read as their value)
_OWNER_WORDS = {OwnerKind.TPU_SLICE: "multi-host TPU slice",
                OwnerKind.TPU_QUEUED_RESOURCE: "TPU queued resource"}


def owner_words(kind: str) -> str:
    """An owner kind as a person reads it ("multi-host TPU slice" for `tpu-slice`)."""
    return next((words for k, words in _OWNER_WORDS.items() if k.value == kind), kind)


class Owner(Frozen):
    """The controller an instance belongs to, as the listing (and, for groups, the group's own
    description) says. `desired`/`min_size`/`max_size` are the group's sizes where the cloud
    says so (ASG: DesiredCapacity/MinSize/MaxSize; MIG: targetSize and its autoscaler's
    min/max); `tags` are the group's own tags or labels (inherited for attribution, read for
    protect and snooze)."""

    kind: OwnerKind
    name: str
    scope: str = ""  # AWS region; GCP zone (zonal MIG) or region (regional MIG)
    cluster: str | None = None  # the Kubernetes / EMR / Ray ... cluster, where there is one
    desired: int | None = None
    min_size: int | None = None
    max_size: int | None = None
    via: str = ""  # what said so: "tag aws:autoscaling:groupName", "metadata created-by"
    tags: dict[str, str] = Field(default_factory=dict)

    def __str__(self) -> str:
        where = f" in cluster {self.cluster}" if self.cluster and self.cluster != self.name else ""
        return f"{owner_words(self.kind)} {self.name}{where}"


class InstanceKind(StrEnum):
    """The registry kinds (costguard/policy/kinds.py) whose items are machines listed and
    judged as instances are."""

    INSTANCE = "instance"
    NOTEBOOK = "notebook"  # SageMaker notebook instance, Vertex AI Workbench instance
    WORKLOAD = "workload"  # a Kubernetes workload holding GPUs (costguard/k8s/)


class Instance(Frozen, SharesFieldsSet):
    """One VM as seen in inventory at `observed_at`."""

    provider: ProviderName
    account: str  # AWS account id, GCP project id, or the simulated account
    region: str
    zone: str | None = None
    instance_id: str
    name: str | None = None
    instance_type: str
    state: InstanceState
    state_reason: str | None = None  # e.g. "Server.SpotInstanceTermination"
    lifecycle: Lifecycle = Lifecycle.ON_DEMAND
    gpu_count: int = 0
    gpu_model: str | None = None
    gpu_memory_mib: int | None = None  # per GPU
    launch_time: datetime
    tags: dict[str, str] = Field(default_factory=dict)
    observed_at: datetime
    # who the instance runs as, where the listing call says so without extra calls: the AWS
    # instance profile ARN (IamInstanceProfile.Arn), the GCP service account email
    # (serviceAccounts[0].email); kept in the store (instances.launched_by)
    launched_by: str | None = None
    # the controller that owns it (None: a pet VM costguard may stop itself); instances.owner
    owner: Owner | None = None
    # the registry kind a policy governs it as (`resource:`, costguard/policy/kinds.py): a
    # SageMaker notebook instance or a Workbench instance is a `notebook`; instances.kind
    kind: InstanceKind = InstanceKind.INSTANCE

    @property
    def managed(self) -> bool:
        return self.owner is not None

    @property
    def key(self) -> InstanceKey:
        return InstanceKey(provider=self.provider, instance_id=self.instance_id)

    @property
    def family(self) -> str:
        """`p4d.24xlarge` -> `p4d`; `a2-highgpu-1g` -> `a2`."""
        t = self.instance_type
        return t.split(".", 1)[0] if "." in t else t.split("-", 1)[0]

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0


class GpuSignal(StrEnum):
    """Which measurement an idle verdict rests on, most honest first."""

    SM_ACTIVE = "sm_active"  # NVML GPM / DCGM SM activity: share of SM cycles busy
    UTIL_GPU = "util_gpu"  # nvmlDeviceGetUtilizationRates.gpu: time any kernel ran
    MEM_USED = "mem_used"  # bytes held; evidence, never proof of work


class TelemetrySource(StrEnum):
    AGENT = "agent"
    CLOUDWATCH = "cloudwatch"
    CLOUD_MONITORING = "cloud-monitoring"
    SIM = "sim"
    DCGM = "dcgm-exporter"  # a Kubernetes pod's GPUs, read from the cluster's Prometheus


MAX_SPAN_MINUTES = 60  # the longest cloud metric period costguard reads (CloudWatch: 1 h)
# readings' percentages are kept to 1/PERCENT_GRID of a point, rounded down (store/blocks.py,
# store/packed.py); a threshold compared with them is given on that grid
PERCENT_GRID = 100


class GpuMinute(Frozen):
    """One GPU's summary over one minute (the unit the agent pushes and the store keeps), or
    over `span_minutes` whole minutes from `minute` with the same values: a cloud metric's
    5-minute point is one reading, not five copies. Consumers count it as that many
    GPU-minutes (`covering`, `slots`).

    Percentages are 0-100. `sm_*`, `tensor_mean` and `dram_bw_mean` are None where GPM/DCGM
    is not available. `host_*` describe the whole host over the same minute (every GPU's
    summary of a minute carries the same host figures; None where nothing measured them):
    CPU busy and iowait as shares of all cores, the cores busy >= 90% of the minute, memory
    in use (MemTotal - MemAvailable, the minute's maximum), and what corroborates work in
    progress on a host whose GPUs look idle (docs/agent.md "Host activity"): disk and
    network bytes per second, logged-in sessions and seconds since the last input on any of
    their terminals, Jupyter kernels busy and seconds since a kernel's last activity. The
    `gpu_proc_*` figures are this GPU's own: the CPU its processes used (percent of one
    core) and the age of the youngest of them. `power_limit_w` is the GPU's enforced power
    limit, the scale the signal checks (telemetry/trust.py) measure power against.
    """

    # a figure that is not a number (NaN, infinite) is no reading, refused like any other
    # figure out of range (`providers.cloud_readings.validated`, the agent's 422)
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    provider: ProviderName
    instance_id: str
    gpu_index: int = Field(default=0, ge=0, le=INT32)
    minute: datetime  # start of the minute, UTC, seconds zeroed
    source: TelemetrySource
    span_minutes: int = Field(default=1, ge=1, le=MAX_SPAN_MINUTES)
    samples: int = Field(default=1, ge=1, le=INT32)
    util_mean: float | None = Field(default=None, ge=0, le=100)
    util_p95: float | None = Field(default=None, ge=0, le=100)
    util_max: float | None = Field(default=None, ge=0, le=100)
    util_active_share: float | None = Field(default=None, ge=0, le=1)  # share of samples > 0
    sm_mean: float | None = Field(default=None, ge=0, le=100)
    sm_p95: float | None = Field(default=None, ge=0, le=100)
    sm_max: float | None = Field(default=None, ge=0, le=100)
    mem_used_bytes: int | None = Field(default=None, ge=0, le=INT64)  # max over the minute
    mem_total_bytes: int | None = Field(default=None, ge=0, le=INT64)
    power_w_mean: float | None = Field(default=None, ge=0)
    process_count: int | None = Field(default=None, ge=0, le=INT32)
    top_process_pid: int | None = Field(default=None, ge=0, le=INT32)
    top_process_bytes: int | None = Field(default=None, ge=0, le=INT64)
    tensor_mean: float | None = Field(default=None, ge=0, le=100)  # GPM any_tensor_util
    dram_bw_mean: float | None = Field(default=None, ge=0, le=100)  # GPM dram_bw_util
    host_cpu_pct: float | None = Field(default=None, ge=0, le=100)
    host_iowait_pct: float | None = Field(default=None, ge=0, le=100)
    host_cpus: int | None = Field(default=None, ge=1, le=INT32)
    host_hot_cores: int | None = Field(default=None, ge=0, le=INT32)
    host_mem_used_bytes: int | None = Field(default=None, ge=0, le=INT64)
    host_mem_total_bytes: int | None = Field(default=None, ge=0, le=INT64)
    power_limit_w: float | None = Field(default=None, gt=0)
    host_disk_bps: float | None = Field(default=None, ge=0)
    host_net_bps: float | None = Field(default=None, ge=0)
    host_sessions: int | None = Field(default=None, ge=0, le=INT32)
    host_input_idle_s: float | None = Field(default=None, ge=0)
    kernels_busy: int | None = Field(default=None, ge=0, le=INT32)
    kernel_idle_s: float | None = Field(default=None, ge=0)
    gpu_proc_cpu_pct: float | None = Field(default=None, ge=0)
    gpu_proc_age_s: float | None = Field(default=None, ge=0)


class Verdict(StrEnum):
    ACTIVE = "active"
    IDLE = "idle"
    UNDERUSED = "underused"
    NO_DATA = "no-data"


class Classification(Frozen):
    """What the classifier concluded about an instance's GPUs over a window."""

    verdict: Verdict
    signal: GpuSignal | None
    evidence: str
    window_start: datetime
    window_end: datetime
    coverage: float = Field(ge=0, le=1)  # share of expected GPU-minutes that had data
    value: float | None = None  # the statistic compared with the threshold


class ActionKind(StrEnum):
    NOTIFY = "notify"
    TAG = "tag"
    STOP = "stop"
    START = "start"
    TERMINATE = "terminate"
    SCALE_IN = "scale_in"
    SCALE_TO_ZERO = "scale_to_zero"
    DELETE = "delete"  # a volume, snapshot or address (costguard/standing/)


class ActionOutcome(StrEnum):
    DONE = "done"
    DRY_RUN = "dry-run"
    SKIPPED = "skipped"  # the instance changed meanwhile, or a safety rule said no
    FAILED = "failed"


AT_MINIMUM = "at its minimum size"  # a scale-in's detail when the group cannot shrink


class ActionResult(Frozen):
    """What a provider reports back for one action call."""

    outcome: ActionOutcome
    detail: str = ""
    state_after: InstanceState | None = None


class Gap(Frozen):
    """A scope (account/project x region) that could not be read this cycle."""

    provider: ProviderName
    scope: str
    error: str


class Inventory(Frozen):
    """Result of listing one provider: what was seen, and what could not be seen."""

    instances: list[Instance] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)


# The most an hour of one instance can cost, as costguard takes a price: the dearest GPU
# machines list near $100/h. A figure past it is a typo or a broken bill line, and a cost
# interval's micro-dollars must fit a 64-bit integer (an override of 1e15 $/h stopped
# accrual at its first interval, every cycle).
MAX_USD_PER_HOUR = 100_000.0


class PriceQuote(Frozen):
    """An hourly price and where it came from (so reports can say how a number was made)."""

    usd_per_hour: float = Field(ge=0)
    source: str  # e.g. "aws on-demand table 2026-11-01", "spot price history"
    # the day the price was last known current (a fetch, a table's snapshot, a bill's
    # period); None where it is current by construction (custom prices, the simulated cloud)
    as_of: date | None = None
    # a shipped table or an upper bound, not the cloud's own answer: reports say so
    fallback: bool = False


def as_of_date(text: str) -> date | None:
    """A table's `as_of` ("2025-05" or "2026-11-23") as a date; a month reads as its first
    day, so an age computed from it is never understated."""
    parts = text.strip().split("-")
    try:
        if len(parts) == 2:
            return date(int(parts[0]), int(parts[1]), 1)
        return date.fromisoformat(text.strip())
    except ValueError:
        return None
