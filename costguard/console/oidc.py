"""OpenID Connect login for the console (Authlib's Starlette client).

    GET /console/login          -> the provider's authorization page (code flow, nonce, state)
    GET /console/auth/callback  <- the provider sends the person back; the ID token is
                                   checked (signature, issuer, audience, nonce) and the user
                                   and groups are kept in the signed session cookie
    GET /console/logout         forgets the session
The routes are mounted with the pages at /console.

The groups come from the ID token's `oidc.groups_claim`, else from the userinfo endpoint;
the session keeps only `console.admin_group` of them, if the person is in it.
"""

from __future__ import annotations

import logging
from typing import Any

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.starlette_client import OAuth, OAuthError
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from costguard.console.auth import LOGIN_PATH, MOUNT, safe_next, split_groups
from costguard.console.settings import ConsoleSettings
from costguard.daemon.logs import REFUSALS

log = logging.getLogger("costguard.console")
# a failed login is anyone's to repeat, each with words of their choosing: a minute's worth
# is one line (the logger's throttle, daemon/logs.py)
refused = logging.getLogger(REFUSALS)

CALLBACK_PATH = "/console/auth/callback"
# what Authlib raises for an ID token that does not check out: its own errors, or joserfc's
# (which it verifies signatures with)
_TOKEN_REFUSED = (AuthlibBaseError, JoseError)


def oidc_routes(cfg: ConsoleSettings) -> list[BaseRoute]:
    oauth = OAuth()
    oc = cfg.oidc
    secret = oc.client_secret.get_secret_value() if oc.client_secret else None
    oauth.register("idp", client_id=oc.client_id, client_secret=secret,
                   server_metadata_url=oc.issuer.rstrip("/") + "/.well-known/openid-configuration",
                   client_kwargs={"scope": oc.scopes})
    client: Any = oauth.create_client("idp")

    def callback_url(request: Request) -> str:
        if oc.public_url:
            return oc.public_url.rstrip("/") + CALLBACK_PATH
        return str(request.url.replace(path=CALLBACK_PATH, query=""))

    async def login(request: Request) -> Response:
        request.session["next"] = safe_next(request.query_params.get("next"))
        try:
            response: Response = await client.authorize_redirect(request, callback_url(request))
        except Exception as exc:  # the provider's discovery document cannot be read
            refused.warning("OIDC login failed: %s: %s", type(exc).__name__, exc)
            return PlainTextResponse("The identity provider cannot be reached; try again "
                                     "later.", status_code=503)
        return response

    async def callback(request: Request) -> Response:
        try:
            token = await client.authorize_access_token(request)
        except OAuthError as exc:
            refused.warning("OIDC login refused: %s", exc.error)
            return PlainTextResponse(f"Login failed: {exc.error}. Start again at "
                                     f"{LOGIN_PATH}.", status_code=401)
        except _TOKEN_REFUSED as exc:  # the ID token did not check out (signature, claims)
            refused.warning("OIDC login refused: the ID token: %s: %s",
                            type(exc).__name__, exc)
            return PlainTextResponse("Login failed: the identity provider's token did not "
                                     f"check out. Start again at {LOGIN_PATH}.",
                                     status_code=401)
        except Exception as exc:  # the token endpoint failed, or did not answer
            refused.warning("OIDC login failed at the token endpoint: %s: %s",
                            type(exc).__name__, exc)
            return PlainTextResponse("The identity provider did not complete the login; "
                                     f"try again later at {LOGIN_PATH}.", status_code=502)
        claims = dict(token.get("userinfo") or {})
        if oc.groups_claim not in claims:
            try:
                claims.update(await client.userinfo(token=token))
            except Exception as exc:
                log.info("OIDC userinfo not read (%s): no groups", type(exc).__name__)
        name = str(claims.get(oc.user_claim) or claims.get("sub") or "")
        if not name:
            return PlainTextResponse("Login failed: the ID token names nobody.", 401)
        # only the group that matters is kept: the session is a cookie, and a person in
        # hundreds of groups (a directory's GUIDs) made one past the 4 KB a browser stores,
        # so every page sent them back to the login, for ever
        groups = split_groups(claims.get(oc.groups_claim))
        request.session["user"] = {"name": name,
                                   "groups": [g for g in groups if g == cfg.admin_group]}
        log.info("console login", extra={"user": name})
        return RedirectResponse(safe_next(request.session.pop("next", None)), 303)

    async def logout(request: Request) -> Response:
        request.session.clear()
        return PlainTextResponse("Logged out.")

    # mounted with the pages at /console
    return [Route(LOGIN_PATH.removeprefix(MOUNT), login, methods=["GET"]),
            Route(CALLBACK_PATH.removeprefix(MOUNT), callback, methods=["GET"]),
            Route("/logout", logout, methods=["GET"])]
