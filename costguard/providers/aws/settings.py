"""`providers.aws` in costguard.yaml: which accounts and regions to read, and how.

Example::

    providers:
      aws:
        accounts:
          - id: "111111111111"        # assumes arn:aws:iam::111111111111:role/CostguardRole
          - id: "222222222222"
            role_arn: arn:aws:iam::222222222222:role/Custom
        external_id: ${COSTGUARD_AWS_EXTERNAL_ID}
        regions: [us-east-1, us-west-2]         # or "all"
        cloudwatch: {gpu_namespace: CWAgent, instance_dimension: auto}
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

_ACCOUNT_ID = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AwsAccount(_Strict):
    """One account to read. Without `role_arn` the role `role_name` in that account is assumed,
    except for the account the ambient credentials already belong to."""

    id: str
    role_arn: str | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_is_twelve_digits(cls, value: object) -> object:
        # An unquoted id is a number: twelve digits are the id; fewer cannot be told apart
        # from another account's (YAML reads 012345670123 as the octal 1402433619, so its
        # leading zeros were not merely dropped), and governing a wrong account is no guess
        # to make.
        if isinstance(value, int) and not isinstance(value, bool):
            if 10**11 <= value < 10**12:
                return str(value)
            raise ValueError(
                f"AWS account id {value} is a number, not 12 digits (YAML reads an unquoted "
                "id that starts with 0 as octal); quote it: id: '012345678901'")
        if not isinstance(value, str) or not _ACCOUNT_ID.match(value):
            raise ValueError(
                f"AWS account id {value!r} must be 12 digits; quote it in YAML ('012345678901')"
            )
        return value

    @field_validator("role_arn")
    @classmethod
    def _role_arn_shape(cls, value: str | None) -> str | None:
        if value is not None and not _ROLE_ARN.match(value):
            raise ValueError(
                f"role_arn {value!r} is not an IAM role ARN "
                "(expected arn:aws:iam::<12-digit account>:role/<name>)"
            )
        return value


Measurement = Literal["utilization_gpu", "memory_used", "memory_total"]
# the agent's `mem` and `cpu` plugins' measurements costguard reads (aws/host_metrics.py)
HostMeasurement = Literal["mem_used_percent", "cpu_usage_iowait"]


def _all_measurements() -> list[Measurement]:
    return ["utilization_gpu", "memory_used", "memory_total"]


class CloudWatchSettings(_Strict):
    """Where the CloudWatch agent puts GPU metrics.

    `instance_dimension`: true when the agent config has `append_dimensions: {InstanceId: ...}`
    (series carry InstanceId); false when they carry only `host`/`index`/`name`; `auto` reads both.
    `period_seconds`: the agent's `metrics_collection_interval` (60, 120, ... 300); each
    datapoint then counts for that many seconds of coverage.
    `measurements`: what the agent's `nvidia_gpu` `measurement` list publishes (of
    utilization_gpu, memory_used, memory_total); only those are listed and asked for.
    `rollup_by_instance`: the agent config has `aggregation_dimensions: [["InstanceId"]]`, so
    each instance has one series per measurement with the single dimension InstanceId:
    costguard then asks for those directly, without ListMetrics (per-GPU series, if any, are
    not read).
    `max_span_minutes`: the longest time span one GetMetricData call asks for. Unset, a call
    asks for as long a span as its 100,800-datapoint limit holds for the queries it carries
    (500 queries of 5-minute points: 16 hours; of 1-minute points: 3 hours), so a first
    cycle's hour of history is one call per 500 series, not four. Set it (e.g. 15) to keep
    each response small: a throttled or timed-out call then re-reads one span, not the whole
    history, at the price of one call per span.
    `host_cpu`: also ask, in the same GetMetricData calls, for `AWS/EC2` `CPUUtilization`
    of the instances that have GPU series: the host CPU the efficiency verdict weighs
    against the GPU (docs/recommend.md). EC2 publishes it every 5 minutes (every minute
    with detailed monitoring); each GPU minute takes the latest point of the 5 before it.
    `host_measurements`: what the agent's `mem` and `cpu` plugins publish beside the GPUs
    (of `mem_used_percent` and `cpu_usage_iowait`), in the same namespace and layout: read
    in the same calls, they give the efficiency verdict the host's memory and I/O wait
    where no costguard agent runs (providers/aws/host_metrics.py). None by default.
    """

    gpu_namespace: str = "CWAgent"
    instance_dimension: bool | Literal["auto"] = "auto"
    period_seconds: int = Field(default=60, ge=60, le=300)
    max_span_minutes: int | None = Field(default=None, ge=1, le=24 * 60)
    measurements: list[Measurement] = Field(default_factory=_all_measurements, min_length=1)
    rollup_by_instance: bool = False
    host_cpu: bool = True
    host_measurements: list[HostMeasurement] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rollup_needs_instance_ids(self) -> CloudWatchSettings:
        if self.rollup_by_instance and self.instance_dimension is False:
            raise ValueError(
                "rollup_by_instance needs series that carry InstanceId: set instance_dimension "
                "to true (the agent's append_dimensions has InstanceId)"
            )
        if "utilization_gpu" not in self.measurements:
            raise ValueError(
                "measurements must include utilization_gpu: it is what idleness is judged by"
            )
        return self

    @field_validator("period_seconds")
    @classmethod
    def _whole_minutes(cls, value: int) -> int:
        if value % 60:
            raise ValueError(
                f"period_seconds {value} must be a whole number of minutes (60, 120, ... 300): "
                "set it to the CloudWatch agent's metrics_collection_interval"
            )
        return value


class AwsSettings(_Strict):
    accounts: list[AwsAccount] = Field(default_factory=list)
    discover_accounts: Literal["organizations"] | None = None
    role_name: str = "CostguardRole"
    external_id: SecretStr | None = None
    regions: list[str] | Literal["all"] = "all"
    max_workers: int = Field(default=8, ge=1, le=64)
    max_attempts: int = Field(default=8, ge=1, le=20)
    cloudwatch: CloudWatchSettings = Field(default_factory=CloudWatchSettings)
    endpoint_url: str | None = None
    session_name: str = "costguard"
    spot_product_description: str = "Linux/UNIX"
    # how long the Auto Scaling groups' sizes and tags the inventory read are reused (0:
    # read every cycle); acting on a group always reads it first
    group_sizes_max_age_minutes: int = Field(default=15, ge=0, le=24 * 60)
    # SageMaker notebook instances are listed beside the EC2 instances (resource: notebook;
    # aws/notebooks.py); a role without sagemaker:ListNotebookInstances lists none
    notebooks: bool = True

    @field_validator("regions")
    @classmethod
    def _regions_look_like_regions(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list):
            if not value:
                raise ValueError('regions is empty: list at least one region, or write "all"')
            bad = [r for r in value if not _REGION.match(r)]
            if bad:
                raise ValueError(
                    f"not AWS region names: {', '.join(bad)} (expected e.g. us-east-1, eu-west-1)"
                )
        return value

    @field_validator("role_name")
    @classmethod
    def _role_name_shape(cls, value: str) -> str:
        if not re.match(r"^[\w+=,.@-]{1,64}$", value):
            raise ValueError(f"role_name {value!r} is not a valid IAM role name")
        return value

    @model_validator(mode="after")
    def _accounts_unique(self) -> AwsSettings:
        ids = [a.id for a in self.accounts]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"accounts lists {', '.join(dupes)} more than once")
        return self

    def role_arn_for(self, account: AwsAccount) -> str:
        return account.role_arn or f"arn:aws:iam::{account.id}:role/{self.role_name}"
