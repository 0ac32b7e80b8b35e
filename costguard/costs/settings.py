"""The `costs:` section of costguard.yaml (the lead adds it to Settings as `costs`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CostSettings(BaseModel):
    """Prices, history and spend alerts.

    Example (costguard.yaml):

        costs:
          price_overrides: prices.yml     # negotiated discounts, custom and disk prices
          rollup_after: 2d                # raw intervals roll up into days after this
          anomaly_lookback_days: 56       # history the baselines learn from
          price_refresh_interval: 1d      # daemon fetches list prices (null: never)
    """

    model_config = ConfigDict(extra="forbid")

    price_overrides: Path | None = Field(
        default=None, description="YAML file with discounts, prices and disks overrides.")
    rollup_after: timedelta = Field(default=timedelta(days=2),
                                    description="Roll raw intervals up into days after this.")
    anomaly_lookback_days: int = Field(default=56, ge=14, le=366)
    price_refresh_interval: timedelta | None = Field(
        default=timedelta(days=1), description="How often the daemon fetches list prices "
        "from the clouds' price APIs (null: never; `costguard prices refresh` by hand).")


def costs_settings(settings: Any) -> CostSettings:
    """The `costs` section of `settings`, or the defaults until Settings carries one."""
    found = getattr(settings, "costs", None)
    return found if isinstance(found, CostSettings) else CostSettings()
