"""Build the configured providers."""

from __future__ import annotations

from costguard.clock import Clock
from costguard.config import Settings
from costguard.providers.base import Provider


def build_providers(settings: Settings, clock: Clock) -> dict[str, Provider]:
    """One provider per enabled section of `providers:` in the configuration, and `k8s`
    for the Kubernetes clusters costguard may act in (those with an `api`)."""
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
    if any(c.api is not None for c in settings.kubernetes.clusters):
        from costguard.costs.pricing import PriceOverrides
        from costguard.k8s.provider import KubernetesProvider

        overrides = settings.costs.price_overrides
        out["k8s"] = KubernetesProvider(
            settings.kubernetes, clock,
            PriceOverrides.load(overrides) if overrides else None)
    return out
