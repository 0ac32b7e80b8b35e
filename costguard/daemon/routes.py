"""Routes other parts of costguard contribute to the daemon's HTTP app.

- Agent ingest (`costguard.telemetry.ingest.telemetry_routes`), written to the store by
  `StoreSink`; mounted when an agent token is configured (`http.ingest_token` or
  `COSTGUARD_AGENT_TOKEN`), since an unauthenticated ingest endpoint must not exist.
- Slack interactivity (`costguard.alerts.interactive.slack_routes`), mounted when the
  Slack app's signing secret is configured; clicks are applied by `journal_actions`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import SecretStr
from starlette.routing import BaseRoute

from costguard.clock import Clock, SystemClock
from costguard.config import Settings, ingest_token
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.settings import DaemonSettings
from costguard.daemon.sink import StoreHooks, StoreSink, gpu_counts
from costguard.store.db import Database

if TYPE_CHECKING:
    from costguard.daemon.identity import IdentityAuthority
    from costguard.daemon.proofs import Proven

log = logging.getLogger("costguard.http")


def extra_routes(settings: Settings, cfg: DaemonSettings, db: Database,
                 metrics: DaemonMetrics, clock: Clock | None = None) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    token = ingest_token(settings)
    if token:
        from costguard.daemon.identity import identity_routes
        from costguard.telemetry.ingest import telemetry_routes

        now = (clock or SystemClock()).now
        authority = identity_authority(settings, token, db)
        routes.extend(telemetry_routes(token=token, sink=StoreSink(db, metrics), clock=now,
                                       gpu_counts=gpu_counts(db), identity=authority,
                                       hooks=StoreHooks(db)))
        routes.extend(identity_routes(authority, token=token, clock=now))
    else:
        log.warning("agent ingest disabled: set COSTGUARD_AGENT_TOKEN (or http.ingest_token) "
                    "to accept GPU telemetry from costguard agents")
    routes.extend(slack_interactivity_routes(settings, cfg, db, clock))
    return routes


def _signing_secret(settings: Settings, cfg: DaemonSettings) -> SecretStr | None:
    secret = cfg.slack_signing_secret or settings.alerts.slack.signing()
    return secret if secret is not None and secret.get_secret_value() else None


def slack_interactivity_routes(settings: Settings, cfg: DaemonSettings, db: Database,
                               clock: Clock | None = None) -> list[BaseRoute]:
    """Slack buttons (snooze, stop now), journaled by `journal_actions`; mounted when the
    Slack app's signing secret is configured (`alerts.slack.signing_secret`)."""
    secret = _signing_secret(settings, cfg)
    if secret is None:
        return []
    from urllib.parse import urlsplit

    from costguard.alerts.interactive import SLACK_RESPONSE_URLS, journal_actions, slack_routes

    on_action = journal_actions(db, clock or SystemClock(), settings.alerts.max_snooze)
    # a Slack of its own (`api_base_url` elsewhere than slack.com: GovSlack, a test double)
    # hands out response URLs on its own host too
    api = urlsplit(settings.alerts.slack.api_base_url)
    own = () if api.hostname == "slack.com" else (f"{api.scheme}://{api.netloc}/",)
    return list(slack_routes(secret, on_action, response_urls=(*SLACK_RESPONSE_URLS, *own)))


def identity_authority(settings: Settings, token: str, db: Database) -> IdentityAuthority:
    """The verifiers and credentials of `http.identity`, with the store's launch times (a
    document from an earlier launch of an instance is refused)."""
    from costguard.daemon.aws_identity import AwsDocuments
    from costguard.daemon.google_tokens import GoogleTokens
    from costguard.daemon.identity import Credentials, IdentityAuthority
    from costguard.store.tables import AgentProofRow, InstanceRow

    cfg = settings.http.identity

    def record(proven: Proven, at: datetime) -> None:
        with db.session() as s:
            s.merge(AgentProofRow(provider=proven.provider, instance_id=proven.instance_id,
                                  form=proven.form, verified_by=proven.verified_by[:200],
                                  proven_at=at))
            s.commit()

    def launch_time_of(provider: str, instance_id: str) -> datetime | None:
        with db.session() as s:
            row = s.get(InstanceRow, (provider, instance_id))
            return row.launch_time if row is not None else None

    return IdentityAuthority(
        credentials=Credentials(token), aws=AwsDocuments(cfg.aws_certs_dir, cfg.aws_forms),
        gcp=GoogleTokens(cfg.audience, cfg.google_certs_file, cfg.google_certs_url),
        required=cfg.required, launch_time_of=launch_time_of, record=record)
