"""Routes other parts of costguard contribute to the daemon's HTTP app.

- Agent ingest (`costguard.telemetry.ingest.telemetry_routes`), written to the store by
  `StoreSink`; mounted when an agent token is configured (`http.ingest_token` or
  `COSTGUARD_AGENT_TOKEN`), since an unauthenticated ingest endpoint must not exist.
- Slack interactivity: `slack_interactivity_routes` is the hook. It mounts
  `slack_routes(signing_secret, on_action)` from the first `costguard.alerts` module that
  defines it, when a signing secret is configured; until then it mounts nothing.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from typing import Any

from starlette.routing import BaseRoute

from costguard.config import Settings
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.settings import DaemonSettings, ingest_token
from costguard.daemon.sink import StoreSink
from costguard.store.db import Database

log = logging.getLogger("costguard.http")


def extra_routes(settings: Settings, cfg: DaemonSettings, db: Database,
                 metrics: DaemonMetrics) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    token = ingest_token(settings)
    if token:
        from costguard.telemetry.ingest import telemetry_routes

        routes.extend(telemetry_routes(token=token, sink=StoreSink(db, metrics)))
    else:
        log.warning("agent ingest disabled: set COSTGUARD_AGENT_TOKEN (or http.ingest_token) "
                    "to accept GPU telemetry from costguard agents")
    routes.extend(slack_interactivity_routes(settings, cfg, db))
    return routes


def _signing_secret(settings: Settings, cfg: DaemonSettings) -> str | None:
    if cfg.slack_signing_secret is not None:
        return cfg.slack_signing_secret.get_secret_value() or None
    slack = getattr(getattr(settings, "alerts", None), "slack", None)
    secret = getattr(slack, "signing", None) or getattr(slack, "signing_secret", None)
    getter = getattr(secret, "get_secret_value", None)
    value = getter() if callable(getter) else secret
    return str(value) if value else None


def find_slack_routes() -> tuple[Callable[..., list[BaseRoute]], Any] | None:
    """`(slack_routes, module)` from the first costguard.alerts module that defines it."""
    package = importlib.import_module("costguard.alerts")
    for info in pkgutil.iter_modules(package.__path__):
        try:
            module = importlib.import_module(f"costguard.alerts.{info.name}")
        except Exception:  # a half-written sibling module must not stop the daemon
            continue
        factory = getattr(module, "slack_routes", None)
        if callable(factory):
            return factory, module
    return None


def slack_interactivity_routes(settings: Settings, cfg: DaemonSettings, db: Database
                               ) -> list[BaseRoute]:
    """HOOK: Slack buttons (snooze, protect). Mounted when both the routes and a secret exist."""
    secret = _signing_secret(settings, cfg)
    found = find_slack_routes()
    if found is None or not secret:
        if secret:
            log.warning("slack interactivity: a signing secret is set but no "
                        "costguard.alerts module provides slack_routes(); not mounted")
        return []
    factory, module = found
    on_action = getattr(module, "store_action_handler", None)
    handler = on_action(db) if callable(on_action) else None
    routes = factory(secret, handler) if handler is not None else factory(secret)
    return list(routes)
