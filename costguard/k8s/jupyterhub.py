"""Stopping a JupyterHub single-user server the way the hub's idle culler does: through the
hub's REST API, `DELETE /users/{name}/server` (a named server:
`DELETE /users/{name}/servers/{server}`), answered 204 when it stopped and 202 while it
stops. KubeSpawner marks its pods with `component: singleuser-server` and names the user
and the server in the annotations `hub.jupyter.org/username` and
`hub.jupyter.org/servername` (the labels hold escaped copies)."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from costguard.errors import ProviderError
from costguard.k8s.api import KubeObject
from costguard.k8s.settings import JupyterHubSettings

COMPONENT = "singleuser-server"
USER, SERVER = "hub.jupyter.org/username", "hub.jupyter.org/servername"


def is_server(pod: KubeObject) -> bool:
    return pod.labels.get("component") == COMPONENT and bool(
        pod.annotations.get(USER) or pod.labels.get(USER))


def owner(pod: KubeObject) -> tuple[str, str]:
    """(user, server name: '' for the default server) of a single-user pod."""
    user = pod.annotations.get(USER) or pod.labels.get(USER, "")
    return user, pod.annotations.get(SERVER, pod.labels.get(SERVER, ""))


def stop_server(hub: JupyterHubSettings, cluster: str, user: str, server: str,
                timeout: float = 30.0) -> int:
    """Ask the hub to stop the server; its HTTP status (202: stopping, 204: stopped)."""
    path = f"/users/{quote(user, safe='')}/" + (
        f"servers/{quote(server, safe='')}" if server else "server")
    headers = {"Authorization": f"token {hub.token().get_secret_value()}"}
    try:
        response = httpx.delete(hub.url.rstrip("/") + path, headers=headers, timeout=timeout,
                                follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ProviderError("k8s", cluster, f"cannot reach JupyterHub at {hub.url} "
                            f"({type(exc).__name__}); check jupyterhub.url",
                            retryable=True) from None
    if response.status_code not in (202, 204):
        raise ProviderError("k8s", cluster, f"JupyterHub refused to stop {user}'s server: "
                            f"HTTP {response.status_code} {response.text[:200]}".rstrip())
    return response.status_code
