"""Who is looking at the console, and may they act.

`viewer(request)` answers from the configured mode: `none` (loopback only, read-only, no
name), `proxy` (the user and groups headers, believed only from `proxy.trusted` addresses),
`oidc` (the session the login callback wrote). Actions (snooze, stop now) need a viewer in
`admin_group` and a form carrying the session's CSRF token; both are checked here.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from urllib.parse import quote

from starlette.requests import Request

from costguard.console.settings import ConsoleSettings

MOUNT = "/console"  # where the pages (and the login) are mounted
LOGIN_PATH = f"{MOUNT}/login"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
IAP_PREFIX = "accounts.google.com:"  # IAP writes the user as accounts.google.com:EMAIL


@dataclass(frozen=True)
class Viewer:
    name: str  # "" when auth is none: nobody is known, nobody may act
    groups: tuple[str, ...]
    admin: bool

    @property
    def known(self) -> bool:
        return bool(self.name)


ANONYMOUS = Viewer("", (), False)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _trusted(cfg: ConsoleSettings, client: str | None) -> bool:
    if client is None:
        return False
    try:
        addr = ip_address(client)
    except ValueError:
        return False
    return any(addr in ip_network(net, strict=False) for net in cfg.proxy.trusted)


def split_groups(value: object) -> tuple[str, ...]:
    """A groups header or claim: a comma-separated text or a list; anything else is none."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list):
        items = [str(v) for v in value]
    else:
        return ()
    return tuple(g.strip() for g in items if g.strip())


def viewer(request: Request, cfg: ConsoleSettings) -> Viewer | None:
    """The person behind `request`, or None when nobody is logged in."""
    if cfg.auth == "none":
        return ANONYMOUS
    if cfg.auth == "proxy":
        name = request.headers.get(cfg.proxy.user_header, "").strip()
        if not name or not _trusted(cfg, request.client.host if request.client else None):
            return None
        name = name.removeprefix(IAP_PREFIX)
        groups = split_groups(request.headers.get(cfg.proxy.groups_header))
    else:
        user = request.session.get("user")
        if not isinstance(user, dict) or not user.get("name"):
            return None
        name = str(user["name"])
        groups = split_groups(user.get("groups"))
    admin = cfg.admin_group is not None and cfg.admin_group in groups
    return Viewer(name, groups, admin)


def csrf_token(request: Request) -> str:
    """This session's CSRF token (made on first use); every acting form carries it."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, sent: str | None) -> bool:
    token = request.session.get("csrf")
    return (isinstance(token, str) and isinstance(sent, str)
            and hmac.compare_digest(token.encode(), sent.encode()))


def safe_next(target: str | None) -> str:
    """Where to go after the login: only a path of this site, never an open redirect to
    somewhere else."""
    # a browser reads `/\host` as `//host`, another site; control characters can split
    # headers: only a plain path of this site passes
    if (not target or not target.startswith("/") or target.startswith("//")
            or "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7f for c in target)):
        return "/console/"
    return target


def login_url(next_path: str) -> str:
    return f"{LOGIN_PATH}?next={quote(next_path, safe='/')}"


def instance_path(provider: str, instance_id: str) -> str:
    return f"{MOUNT}/instances/{quote(provider, safe='')}/{quote(instance_id, safe='')}"
