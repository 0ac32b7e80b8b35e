"""Build the configured providers."""

from __future__ import annotations

from costguard.clock import Clock
from costguard.config import Settings
from costguard.providers.base import Provider


def build_providers(settings: Settings, clock: Clock) -> dict[str, Provider]:
    """One provider per enabled section of `providers:` in the configuration."""
    out: dict[str, Provider] = {}
    cfg = settings.providers
    if cfg.sim is not None:  # the simulated cloud lives in the demo room, not here
        from costguard.demo.sim import SimProvider

        out["sim"] = SimProvider(cfg.sim, clock)
    if cfg.aws is not None:
        from costguard.providers.aws import AwsProvider

        out["aws"] = AwsProvider(cfg.aws, clock=clock)
    if cfg.gcp is not None:
        from costguard.providers.gcp import GcpProvider

        out["gcp"] = GcpProvider(cfg.gcp, clock=clock)
    return out
