"""Telemetry bound to the instance that sent it: an agent proves which instance it runs on
with the cloud's signed identity, and gets a short-lived credential for that instance only.

- **AWS:** the instance identity document in one of its three signed forms (IMDS
  `/latest/dynamic/instance-identity/rsa2048`, `/signature` or `/pkcs7`), verified against
  AWS's certificate for the document's region: `aws_identity.AwsDocuments`. A document whose
  `pendingTime` is not the launch time inventory knows for the instance is from an earlier
  incarnation and is refused (the document never changes while an instance lives, so this
  is what bounds a replay of a copied one).
- **GCP:** the instance identity token (metadata server, `format=full`, audience =
  `audience`), a JWT signed by Google, verified against Google's keys with its issuer,
  audience, expiry and issue time (5 minutes of clock skew): `google_tokens.GoogleTokens`.

The credential is `cgi1.<payload>.<mac>`: the provider, instance id and expiry, MACed with a
key derived from the agent token, so every replica of the daemon checks it without a store.
How Vault's AWS and GCP auth methods work, in miniature; their pitfalls (a replayed document,
clock skew) are handled as said above.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from costguard.clock import utc
from costguard.daemon.proofs import (
    CLOCK_SKEW,
    IdentitySettingError,
    KeysUnavailable,
    ProofRefused,
    Proven,
)

if TYPE_CHECKING:
    from costguard.daemon.aws_identity import AwsDocuments
    from costguard.daemon.google_tokens import GoogleTokens

__all__ = ["CLOCK_SKEW", "CREDENTIAL_TTL", "Credentials", "IdentityAuthority",
           "IdentitySettingError", "KeysUnavailable", "ProofRefused", "Proven"]

CREDENTIAL_TTL = timedelta(hours=1)
_PREFIX = "cgi1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Credentials:
    """Issues and checks per-instance credentials (HMAC, no state)."""

    def __init__(self, agent_token: str, ttl: timedelta = CREDENTIAL_TTL) -> None:
        self._key = hmac.new(agent_token.encode(), b"costguard-instance-credential-v1",
                             hashlib.sha256).digest()
        self.ttl = ttl

    def issue(self, provider: str, instance_id: str, now: datetime) -> tuple[str, datetime]:
        expires = now + self.ttl
        payload = _b64(json.dumps({"p": provider, "i": instance_id,
                                   "exp": int(expires.timestamp())}).encode())
        mac = _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        return f"{_PREFIX}.{payload}.{mac}", expires

    @staticmethod
    def looks_like(token: str) -> bool:
        return token.startswith(_PREFIX + ".")

    def check(self, token: str, now: datetime) -> tuple[str, str] | None:
        """(provider, instance id) of a valid, unexpired credential; None otherwise."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        expected = _b64(hmac.new(self._key, parts[1].encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected, parts[2]):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
            provider, iid, exp = str(claims["p"]), str(claims["i"]), int(claims["exp"])
        except (ValueError, KeyError, TypeError):
            return None
        if exp <= now.timestamp():
            return None
        return provider, iid


@dataclass
class IdentityAuthority:
    """What the daemon's identity route and ingest need: the verifiers and the credentials."""

    credentials: Credentials
    aws: AwsDocuments
    gcp: GoogleTokens
    required: bool = False  # refuse shared-token pushes for cloud instances
    launch_time_of: Callable[[str, str], datetime | None] = lambda provider, iid: None
    # keeps each proof for `costguard status` (a failure is logged; the proof still holds)
    record: Callable[[Proven, datetime], None] = lambda proven, at: None

    def prove(self, body: Mapping[str, Any], now: datetime) -> Proven:
        provider = body.get("provider")
        if provider == "aws":
            document = body.get("document")
            offered = {form: body[form] for form in ("rsa2048", "signature", "pkcs7")
                       if body.get(form) is not None}
            if not isinstance(document, str | None) or not all(
                    isinstance(v, str) for v in offered.values()):
                raise ProofRefused("aws: send the identity document and its signed bodies "
                                   "(rsa2048, signature or pkcs7, as IMDS serves them) as "
                                   "strings")
            proven = self.aws.verify_offered(document, offered, now)
            known = self.launch_time_of("aws", proven.instance_id)
            if (known is not None and proven.launched is not None
                    and abs(utc(known) - proven.launched) > timedelta(seconds=1)):
                raise ProofRefused(
                    f"the document is from an earlier launch of {proven.instance_id} "
                    f"({proven.launched.isoformat()}, inventory: {utc(known).isoformat()})")
            return proven
        if provider == "gcp":
            token = body.get("token")
            if not isinstance(token, str):
                raise ProofRefused("gcp: send the instance identity token as a string")
            return self.gcp.verify(token, now)
        raise ProofRefused("provider must be aws or gcp (the simulated cloud and hosts "
                           "outside a cloud use the shared token)")


def now_utc() -> datetime:
    return datetime.now(UTC)


IDENTITY_PATH = "/v1/identity"


def identity_routes(authority: IdentityAuthority, *, token: str,
                    clock: Callable[[], datetime] = now_utc) -> list[Any]:
    """`POST /v1/identity`: an agent (holding the shared agent token) sends its proof and
    gets a credential for its own instance. 200 {credential, provider, instance_id,
    expires_at}; 400 malformed; 401 no agent token; 403 proof refused; 503 keys unavailable."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from costguard.daemon.bodies import BodyRefused, BodyTooLarge, parse_json, read_limited

    expected = f"Bearer {token}".encode()

    async def prove(request: Request) -> JSONResponse:
        given = request.headers.get("authorization", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            return JSONResponse({"error": "missing or wrong agent token"}, status_code=401)
        try:
            body = parse_json(await read_limited(request, 64 * 1024))
        except BodyTooLarge:
            return JSONResponse({"error": "proof over 64 KiB"}, status_code=413)
        except BodyRefused as exc:
            return JSONResponse({"error": f"body refused: {exc}"}, status_code=400)
        except ClientDisconnect:
            return JSONResponse({"error": "client disconnected"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "expected a JSON object"}, status_code=400)
        now = clock()
        try:
            proven = await run_in_threadpool(authority.prove, body, now)
        except ProofRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except KeysUnavailable as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        try:
            await run_in_threadpool(authority.record, proven, now)
        except Exception:  # the store's: the proof holds, only status's count misses it
            logging.getLogger(__name__).exception("identity: proof of %s:%s not recorded",
                                                  proven.provider, proven.instance_id)
        credential, expires = authority.credentials.issue(proven.provider,
                                                          proven.instance_id, now)
        return JSONResponse({"credential": credential, "provider": proven.provider,
                             "instance_id": proven.instance_id,
                             "expires_at": expires.isoformat()})

    return [Route(IDENTITY_PATH, prove, methods=["POST"])]
