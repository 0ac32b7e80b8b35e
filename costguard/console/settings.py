"""Settings of the web console (the `console:` section of costguard.yaml).

Who may read: `auth` says how a person is known. `none` serves the pages without a login,
and only on a loopback address (the daemon refuses to serve them anywhere else); `proxy`
trusts a user header set by a reverse proxy in front (oauth2-proxy, IAP) and only from the
addresses in `proxy.trusted`; `oidc` logs people in through an OpenID Connect provider.
Who may act: members of `admin_group` (from the proxy's groups header or the ID token's
groups claim) see the snooze and "stop now" buttons; nobody else does.
"""

from __future__ import annotations

from ipaddress import ip_network
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProxyAuth(_Section):
    """A reverse proxy that authenticated the person (oauth2-proxy, Google IAP)."""

    user_header: str = "X-Forwarded-User"  # IAP: X-Goog-Authenticated-User-Email
    groups_header: str = "X-Forwarded-Groups"  # comma-separated, as oauth2-proxy sends it
    # the proxy's own addresses: a user header from anywhere else is refused (a sidecar
    # proxy reaches the daemon over loopback)
    trusted: list[str] = Field(default_factory=lambda: ["127.0.0.1/32", "::1/128"])

    @field_validator("trusted")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for net in value:
            try:
                ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"{net!r} is not an address or network (e.g. "
                                 "10.0.0.0/8)") from None
        return value


class OidcAuth(_Section):
    """An OpenID Connect provider (Google, Okta, Entra ID, Keycloak, Dex ...)."""

    issuer: str = ""  # its discovery document is <issuer>/.well-known/openid-configuration
    client_id: str = ""
    client_secret: SecretStr | None = None
    scopes: str = "openid email profile"
    groups_claim: str = "groups"  # the ID token / userinfo claim listing the user's groups
    user_claim: str = "email"  # the claim that names the user (falls back to `sub`)
    # where the provider sends people back: <public_url>/auth/callback (default: the
    # address the request came in on)
    public_url: str | None = None


class ConsoleSettings(_Section):
    """The daemon's web pages and `/api/v1` report API."""

    enabled: bool = True
    auth: Literal["none", "proxy", "oidc"] = "none"
    admin_group: str | None = None  # members may snooze and stop from the pages
    session_secret: SecretStr | None = None  # signs the session cookie (random if unset)
    session_hours: int = Field(default=12, ge=1, le=24 * 30)
    proxy: ProxyAuth = Field(default_factory=ProxyAuth)
    oidc: OidcAuth = Field(default_factory=OidcAuth)
    # Prometheus cost metrics: per-instance series for at most this many instances (the
    # costliest); every team's totals are exported whatever the cap
    max_instance_series: int = Field(default=2000, ge=0)
    page_size: int = Field(default=100, ge=1, le=1000)  # API rows per page by default

    @model_validator(mode="after")
    def _oidc_complete(self) -> ConsoleSettings:
        if self.auth == "oidc":
            missing = [k for k in ("issuer", "client_id") if not getattr(self.oidc, k)]
            if self.oidc.client_secret is None:
                missing.append("client_secret")
            if missing:
                raise ValueError("console.auth is oidc but console.oidc."
                                 + ", console.oidc.".join(missing) + " is not set")
        return self
