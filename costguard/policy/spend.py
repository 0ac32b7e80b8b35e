"""Who owns what and how much they may spend: `attribution:`, `budgets:`, `anomalies:`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from costguard.policy.base import Element, Name, OneOrMany, Text

BUILTIN_DIMENSIONS = ("provider", "account", "region", "instance_type", "family")
"""Dimensions every instance has without attribution rules."""


class DimensionRule(Element):
    """How to read one attribution dimension from tags: the first key in `keys` that the
    instance carries wins. Where none is carried as written, the keys are tried in any case
    (`team` finds `Team`), then flattened as a CUR for Athena names tag columns (`CostCenter`
    and `cost-center` find `cost_center`, from `resource_tags_user_cost_center`). `case`
    normalises the value (`lower`, `upper` or `keep`), so `Research` and `research` count as
    one team."""

    yaml_key: ClassVar[str] = "attribution.dimensions.<name>"
    example: ClassVar[str] = """\
attribution:
  dimensions:
    team: {keys: [team, Team, owner-team], case: lower}
"""

    keys: OneOrMany[Text] = Field(min_length=1, description="Tag keys to try, in order.")
    case: Literal["lower", "upper", "keep"] = Field(
        default="keep", description="Case normalisation of the value."
    )


class DeriveRule(Element):
    """A fallback for instances whose tags give no value for a dimension. With
    `from: name_prefix` the start of the instance name is mapped (the longest matching
    prefix wins); with `from: account` the AWS account id or GCP project id is; with
    `from: launcher` the identity the instance runs as, as its listing reports it: on AWS
    the instance profile ARN (`arn:aws:iam::ACCOUNT:instance-profile/NAME`, not the role
    ARN), on GCP the service account email (a trailing `*` matches any suffix)."""

    yaml_key: ClassVar[str] = "attribution.derive[]"
    example: ClassVar[str] = """\
attribution:
  dimensions:
    team: {keys: [team]}
  derive:
    - {dimension: team, from: name_prefix, map: {"res-": research, "ml-": ml-platform}}
    - {dimension: team, from: account, map: {"123456789012": research}}
    - {dimension: team, from: launcher, map: {
        "arn:aws:iam::123456789012:instance-profile/vision-*": vision,
        "trainer@ml-prod.iam.gserviceaccount.com": ml-platform}}
"""

    dimension: Name = Field(description="A dimension defined under `dimensions`.")
    from_: Literal["name_prefix", "account", "launcher"] = Field(
        alias="from", description="What to map."
    )
    map: dict[Text, Text] = Field(
        min_length=1, description="Prefix, account or launcher -> value."
    )


def _not_builtin(value: dict[str, DimensionRule]) -> dict[str, DimensionRule]:
    clash = sorted(set(value) & set(BUILTIN_DIMENSIONS))
    if clash:
        raise PydanticCustomError(
            "dimension",
            f"dimension {clash[0]!r} is built in (built-in dimensions: "
            f"{', '.join(BUILTIN_DIMENSIONS)}); pick another name",
        )
    return value


class Attribution(Element):
    """How spend is attributed to teams, projects and other dimensions, from tags first
    and then from `derive` rules. Only one loaded file may define `attribution`. Budgets,
    anomalies and reports group by these dimensions and by the built-in ones: provider,
    account, region, instance_type, family."""

    yaml_key: ClassVar[str] = "attribution"
    example: ClassVar[str] = """\
attribution:
  dimensions:
    team: {keys: [team, Team, owner-team], case: lower}
    project: {keys: [project]}
    env: {keys: [env, environment], case: lower}
    cost-center: {keys: [cost-center, CostCenter]}
  derive:
    - {dimension: team, from: name_prefix, map: {"res-": research}}
"""

    dimensions: Annotated[dict[Name, DimensionRule], AfterValidator(_not_builtin)] = Field(
        min_length=1, description="Dimension name -> tag rule."
    )
    derive: tuple[DeriveRule, ...] = Field(default=(), description="Fallback rules, in order.")

    @field_validator("derive")
    @classmethod
    def _known_dimensions(
        cls, value: tuple[DeriveRule, ...], info: ValidationInfo
    ) -> tuple[DeriveRule, ...]:
        defined = info.data.get("dimensions")
        if defined is None:  # dimensions itself is invalid and already reported
            return value
        for i, rule in enumerate(value):
            if rule.dimension not in defined:
                raise PydanticCustomError(
                    "dimension",
                    f"derive[{i}] uses dimension {rule.dimension!r}, which `dimensions` "
                    f"does not define (defined: {', '.join(defined)})",
                )
        return value


def _sorted_percentages(value: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(sorted(set(value)))


class Budget(Element):
    """A monthly spending limit for one value of a dimension, e.g. team `research`.
    An alert goes out once per month as spend crosses each `alert_at_percent`."""

    yaml_key: ClassVar[str] = "budgets[]"
    example: ClassVar[str] = """\
attribution:
  dimensions:
    team: {keys: [team], case: lower}
budgets:
  - name: research-monthly
    dimension: team
    value: research
    monthly_usd: 50000
    alert_at_percent: [80, 100]
  - {name: sandbox-account, dimension: account, value: "123456789012", monthly_usd: 2000}
"""

    name: Name = Field(description="Unique across all files.")
    dimension: Text = Field(description="An attribution or built-in dimension.")
    value: Text = Field(description="The dimension value the budget covers.")
    # at most a trillion: kept as micro-dollars, a 64-bit integer (.inf stopped each cycle)
    monthly_usd: float = Field(
        gt=0, le=1e12, description="Budget per calendar month (UTC), in USD, at most a trillion.")
    alert_at_percent: Annotated[
        tuple[Annotated[float, Field(gt=0, le=1000)], ...], AfterValidator(_sorted_percentages)
    ] = Field(default=(80.0, 100.0), min_length=1, description="Alert thresholds.")


class AnomalyRule(Element):
    """Alert when spend per value of a dimension jumps above its usual level. Spend per
    `granularity` bucket is compared with a robust baseline (median and MAD of recent
    buckets); a bucket is anomalous when it exceeds the baseline by more than
    `sensitivity` robust deviations AND by at least `min_impact_usd`."""

    yaml_key: ClassVar[str] = "anomalies[]"
    example: ClassVar[str] = """\
attribution:
  dimensions:
    team: {keys: [team], case: lower}
anomalies:
  - name: team-daily-spend
    dimension: team
    granularity: day
    min_impact_usd: 200
    sensitivity: 3.5
  - {name: region-hourly-spend, dimension: region, granularity: hour, min_impact_usd: 50}
"""

    name: Name = Field(description="Unique across all files.")
    dimension: Text = Field(description="An attribution or built-in dimension.")
    granularity: Literal["day", "hour"] = Field(default="day", description="Bucket size.")
    min_impact_usd: float = Field(default=0, ge=0, description="Ignore smaller excesses.")
    sensitivity: float = Field(
        default=3.0, gt=0, description="Robust deviations above baseline to alert."
    )
