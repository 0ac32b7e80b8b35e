"""The console's OpenID Connect callback when the identity provider fails it: a token
endpoint that errs or does not answer is a 502 that says to try again, an ID token that
does not check out a 401; neither a 500 with a traceback in the log."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from costguard.clock import ManualClock
from costguard.daemon.logs import REFUSALS
from tests.console.harness import console_settings, serve
from tests.daemon_log import daemon_log
from tests.fakes.loopback import free_port
from tests.fakes.loopback import serve as serve_app

CLIENT_ID = "costguard"


@contextmanager
def provider(token: Callable[[str, Request], Response], *, token_endpoint: str | None = None
             ) -> Iterator[tuple[str, RSAKey]]:
    """An identity provider on loopback: discovery and keys as a real one serves them, its
    token endpoint answering with `token(issuer, request)`. Yields (issuer, its key)."""
    key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    base: dict[str, str] = {}

    async def discovery(_request: Request) -> Response:
        issuer = base["url"]
        return JSONResponse({
            "issuer": issuer, "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": token_endpoint or f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks", "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"]})

    async def jwks(_request: Request) -> Response:
        return JSONResponse({"keys": [key.as_dict(private=False)]})

    async def token_route(request: Request) -> Response:
        return token(base["url"], request)

    app = Starlette(routes=[Route("/.well-known/openid-configuration", discovery),
                            Route("/jwks", jwks),
                            Route("/token", token_route, methods=["POST"])])
    with serve_app(app) as url:
        base["url"] = url
        yield url, key


def _callback(issuer: str, store: str, seen: dict[str, str] | None = None
              ) -> tuple[httpx.Response, str, int]:
    """Start a login at the console, come back from the provider with a code: the callback's
    answer, what the daemon logged meanwhile, and the console's answer after (303: to the
    login, nobody logged in). `seen` gets the login's nonce before the callback (what the
    provider's authorization page would have been told)."""
    settings = console_settings(store, {"auth": "oidc", "oidc": {
        "issuer": issuer, "client_id": CLIENT_ID, "client_secret": "s"}})
    with daemon_log(REFUSALS) as out, serve(settings) as site, \
            httpx.Client(base_url=site) as browser:
        start = browser.get("/console/login", follow_redirects=False)
        assert start.status_code == 302, start.text
        query = parse_qs(urlsplit(start.headers["location"]).query)
        if seen is not None:
            seen["nonce"] = query["nonce"][0]
        back = browser.get("/console/auth/callback", params={
            "code": "the-code", "state": query["state"][0]})
        after = browser.get("/console/", follow_redirects=False).status_code
    return back, out.getvalue(), after


def test_a_token_endpoint_that_errs_is_a_502_that_says_to_try_again(
        store: str, cli_clock: ManualClock) -> None:
    with provider(lambda _issuer, _request: JSONResponse({"oops": 1}, 500)) as (issuer, _):
        back, log, after = _callback(issuer, store)
    assert back.status_code == 502 and "try again later" in back.text, back.text
    assert "OIDC login failed at the token endpoint: HTTPStatusError" in log, log
    assert "Traceback" not in log and "unexpected error" not in log, log
    assert after == 303  # nobody logged in


def test_a_token_endpoint_nobody_answers_at_is_a_502(store: str, cli_clock: ManualClock) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/token"
    with provider(lambda _issuer, _request: JSONResponse({}), token_endpoint=nowhere) as (
            issuer, _):
        back, log, after = _callback(issuer, store)
    assert back.status_code == 502 and "try again later" in back.text, back.text
    assert "ConnectError" in log and "Traceback" not in log, log
    assert after == 303


@pytest.mark.parametrize("forged", ["other key", "other audience"])
def test_an_id_token_that_does_not_check_out_is_a_401(
        store: str, cli_clock: ManualClock, forged: str) -> None:
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    seen: dict[str, str] = {}

    def token(issuer: str, _request: Request) -> Response:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": issuer, "sub": "mallory", "iat": now, "exp": now + 300,
            "aud": "someone-else" if forged == "other audience" else CLIENT_ID,
            "nonce": seen["nonce"]}
        signer = stranger if forged == "other key" else keys[0]
        id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, signer)
        return JSONResponse({"access_token": "at", "token_type": "Bearer",
                             "expires_in": 300, "id_token": id_token})

    keys: list[RSAKey] = []
    with provider(token) as (issuer, key):
        keys.append(key)
        back, log, after = _callback(issuer, store, seen)
    assert back.status_code == 401 and "did not check out" in back.text, back.text
    assert "OIDC login refused: the ID token" in log and "Traceback" not in log, log
    assert after == 303  # nobody logged in
