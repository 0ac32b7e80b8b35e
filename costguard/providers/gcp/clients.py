"""Builds the Google clients the provider uses, all from one `GcpSettings`.

Every client shares the same credentials and endpoint options. The zone-operations
client is built here with the same options as the instances client on purpose:
`ExtendedOperation.result()` polls the public endpoint whatever `api_endpoint` says, so
the provider waits on operations itself (see actions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]
import requests.adapters
import requests.exceptions
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import (
    MetricServiceGrpcTransport,
)

from costguard.errors import ConfigError
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.settings import GcpSettings, RetrySettings

# 429 and 503 are what Compute and Monitoring answer under load; 500/504 are transient too.
# google-cloud-compute does not retry 429 by default, so every call passes this Retry.
RETRYABLE = (
    gexc.TooManyRequests,
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.GatewayTimeout,
    gexc.DeadlineExceeded,
    # a connection reset or refused under the REST transport: the client library raises
    # requests' own error, which escaped the act stage as a crash. Mutations carry a
    # requestId, so the one sent again is applied once
    requests.exceptions.ConnectionError,
)


def make_retry(settings: RetrySettings) -> gretry.Retry:
    return gretry.Retry(
        predicate=gretry.if_exception_type(*RETRYABLE),
        initial=settings.initial_s,
        maximum=settings.maximum_s,
        multiplier=settings.multiplier,
        timeout=settings.deadline_s,
    )


@dataclass(frozen=True)
class GcpClients:
    instances: compute_v1.InstancesClient
    zone_operations: compute_v1.ZoneOperationsClient
    metrics: monitoring_v3.MetricServiceClient
    credentials: gcredentials.Credentials | None


def load_credentials(settings: GcpSettings) -> gcredentials.Credentials | None:
    """Anonymous for fakes, a key file if configured, else None: clients then use ADC."""
    if settings.anonymous:
        return gcredentials.AnonymousCredentials()  # type: ignore[no-untyped-call]
    if settings.credentials_file:
        from google.oauth2 import service_account

        try:
            creds: gcredentials.Credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                settings.credentials_file,
                scopes=["https://www.googleapis.com/auth/cloud-platform"],
            )
        except (OSError, ValueError) as exc:
            # The message of a bad key file can quote key material: name only the file.
            raise ConfigError(
                f"providers.gcp.credentials_file: cannot read a service-account key from "
                f"{settings.credentials_file!r} ({type(exc).__name__}). Point it at a JSON key, "
                "or remove it to use Application Default Credentials."
            ) from None
        return creds
    return None


def build_clients(settings: GcpSettings) -> GcpClients:
    credentials = load_credentials(settings)
    compute_opts: dict[str, Any] = {}
    if settings.compute_endpoint:
        compute_opts["api_endpoint"] = settings.compute_endpoint
    options = ClientOptions(**compute_opts)
    instances = compute_v1.InstancesClient(credentials=credentials, client_options=options)
    operations = compute_v1.ZoneOperationsClient(credentials=credentials, client_options=options)
    pool = max(settings.max_workers, settings.batch_workers)
    for client in (instances, operations):
        _widen_pool(client.transport, pool)
    return GcpClients(
        instances=instances,
        zone_operations=operations,
        metrics=_metric_client(settings, credentials),
        credentials=credentials,
    )


def _widen_pool(transport: Any, size: int) -> None:
    """Give the REST transport's HTTP session `size` pooled connections per host.

    requests keeps 10 by default; batch calls run up to `batch_workers` at once, and beyond
    10 urllib3 opens and discards a connection per call (and logs each one)."""
    session = getattr(transport, "_session", None)  # AuthorizedSession, a requests.Session
    if session is None or not hasattr(session, "mount"):
        return
    for prefix in ("https://", "http://"):
        # leave a special adapter (mTLS, configured by the transport) as it is
        if type(session.adapters.get(prefix)) is requests.adapters.HTTPAdapter:
            session.mount(prefix, requests.adapters.HTTPAdapter(pool_maxsize=size))


def _metric_client(
    settings: GcpSettings, credentials: gcredentials.Credentials | None
) -> monitoring_v3.MetricServiceClient:
    endpoint = settings.monitoring_endpoint
    if endpoint and endpoint.startswith("http://"):
        # Plaintext gRPC: only a local fake listens like this. Monitoring has no REST transport.
        channel = grpc.insecure_channel(endpoint.removeprefix("http://"))
        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=channel)
        )
    opts = ClientOptions(api_endpoint=endpoint.removeprefix("https://")) if endpoint else None
    return monitoring_v3.MetricServiceClient(credentials=credentials, client_options=opts)


def batch_transport(instances: compute_v1.InstancesClient, endpoint: str | None = None
                    ) -> tuple[Any, str]:
    """The authorized HTTP session and the base URL of the instances client's REST
    transport, for Compute Engine HTTP batch requests (http_batch.py): the same
    credentials, endpoint (`compute_endpoint` when set) and connection pool as every other
    Compute call."""
    transport = instances.transport
    session = getattr(transport, "_session", None)
    host = endpoint or str(getattr(transport, "_host", "https://compute.googleapis.com"))
    if session is None:  # not the REST transport: a session of its own, same credentials
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(transport._credentials)  # type: ignore[no-untyped-call]
    if "://" not in host:
        host = f"https://{host}"
    return session, host
