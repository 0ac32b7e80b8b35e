"""Finding the projects under a folder or organization (Resource Manager v3, REST).

Walks folders breadth-first and keeps ACTIVE projects. A parent that cannot be read is a
gap; the explicitly configured projects are still listed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import google.auth
import google.auth.exceptions
import requests
from google.auth import credentials as gcredentials
from google.auth.transport.requests import AuthorizedSession

from costguard.errors import ConfigError
from costguard.model import Gap
from costguard.providers.gcp.errors import ROLE_FILE
from costguard.providers.gcp.settings import GcpSettings, RetrySettings

DEFAULT_ENDPOINT = "https://cloudresourcemanager.googleapis.com"
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform.read-only"]
_MAX_FOLDERS = 10_000  # a guard against a cycle or a runaway hierarchy
# throttled or unavailable: retried with the provider's back-off, as the Compute calls are
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class _ListError(Exception):
    pass


def _session(credentials: gcredentials.Credentials | None) -> AuthorizedSession:
    if credentials is None:
        credentials, _project = google.auth.default(scopes=_SCOPES)
    return AuthorizedSession(credentials)  # type: ignore[no-untyped-call]


def _get(session: AuthorizedSession, url: str, params: dict[str, str], retry: RetrySettings
         ) -> requests.Response:
    """One GET, retried with exponential back-off on 429 and 5xx until `retry.deadline_s`."""
    deadline = time.monotonic() + retry.deadline_s
    delay = retry.initial_s
    while True:
        response = session.get(url, params=params, timeout=60)
        if response.status_code not in RETRY_STATUS or time.monotonic() + delay > deadline:
            return response
        time.sleep(delay)
        delay = min(delay * retry.multiplier, retry.maximum_s)


def _paged(session: AuthorizedSession, url: str, parent: str, key: str, retry: RetrySettings
           ) -> Iterator[dict[str, Any]]:
    token = ""
    while True:
        params = {"parent": parent, "pageSize": "1000"}
        if token:
            params["pageToken"] = token
        response = _get(session, url, params, retry)
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise _ListError(f"HTTP {response.status_code}: {message}")
        body = response.json()
        yield from body.get(key, [])
        token = body.get("nextPageToken", "")
        if not token:
            return


def discover(
    settings: GcpSettings, credentials: gcredentials.Credentials | None
) -> tuple[list[str], list[Gap]]:
    """Project ids under `settings.folder` / `settings.organization` (none if unset)."""
    if not settings.parents:
        return [], []
    endpoint = (settings.resource_manager_endpoint or DEFAULT_ENDPOINT).rstrip("/")
    try:
        session = _session(credentials)
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise ConfigError(
            f"providers.gcp: no Google credentials found ({exc}). Run "
            "`gcloud auth application-default login`, or run costguard with a service account "
            "(workload identity on GKE); see docs/gcp.md"
        ) from None
    found: list[str] = []
    gaps: list[Gap] = []
    queue = list(settings.parents)
    seen: set[str] = set()
    while queue and len(seen) < _MAX_FOLDERS:
        parent = queue.pop(0)
        if parent in seen:
            continue
        seen.add(parent)
        # projects and sub-folders separately: a parent whose projects cannot be listed may
        # still show its folders (and the reverse); either failure is one gap for the parent
        errors: list[str] = []
        for kind, keep in (("projects", found), ("folders", queue)):
            field = "projectId" if kind == "projects" else "name"
            try:
                for item in _paged(session, f"{endpoint}/v3/{kind}", parent, kind,
                                   settings.retry):
                    if item.get("state", "ACTIVE") == "ACTIVE" and item.get(field):
                        keep.append(str(item[field]))
            except (_ListError, requests.RequestException) as exc:
                errors.append(f"{kind}: {exc}")
        if errors:
            gaps.append(
                Gap(
                    provider="gcp",
                    scope=parent,
                    error=f"cannot list projects under {parent} ({'; '.join(errors)}); grant "
                    f"resourcemanager.projects.list and resourcemanager.folders.list on it "
                    f"(see {ROLE_FILE}), or list projects explicitly in providers.gcp.projects",
                )
            )
    return sorted(set(found)), gaps
