"""Telemetry bound to the instance that sent it: an agent proves which instance it runs on
with the cloud's signed identity, and gets a short-lived credential for that instance only.

- **AWS:** the instance identity document and its base64 RSA-SHA256 signature (IMDS
  `/latest/dynamic/instance-identity/document` and `/signature`), verified against AWS's
  public RSA certificate for the document's region (PEM files named `<region>.pem`, and
  `default.pem` for every other region: those shipped in `data/aws_identity_certs`, as AWS
  publishes them, or those of `aws_certs_dir` instead). A document whose `pendingTime` is
  not the launch time inventory knows for the instance is from an earlier incarnation and is
  refused (the document never changes while an instance lives, so this is what bounds a
  replay of a copied one).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costguard.clock import utc
from costguard.errors import ConfigError, CostguardError

if TYPE_CHECKING:
    from costguard.daemon.google_tokens import GoogleTokens

CREDENTIAL_TTL = timedelta(hours=1)
CLOCK_SKEW = timedelta(minutes=5)
_PREFIX = "cgi1"


class ProofRefused(CostguardError, PermissionError):
    """The identity proof does not hold (403)."""


class KeysUnavailable(CostguardError):
    """Google's keys could not be had right now (503: the agent tries again)."""


@dataclass(frozen=True)
class Proven:
    provider: str
    instance_id: str
    region: str | None = None
    launched: datetime | None = None  # AWS pendingTime


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


SHIPPED_AWS_CERTS = "data/aws_identity_certs"  # in this package; data/README.md says whence


class IdentitySettingError(ConfigError):
    """A file or folder `http.identity` names cannot serve: the daemon does not start
    (every proof would be refused, and nothing would say why until an agent tried)."""


def _named_pems(folder: Path) -> list[tuple[str, str, bytes]]:
    """(region, file, PEM bytes) of each `<region>.pem` in `folder` (aws_certs_dir)."""
    if not folder.is_dir():
        raise IdentitySettingError(
            f"http.identity.aws_certs_dir: {folder} is not a folder: name a folder of "
            "<region>.pem certificates, or leave it unset for the ones costguard ships")
    found = sorted(folder.glob("*.pem"))
    if not found:
        raise IdentitySettingError(
            f"http.identity.aws_certs_dir: {folder} holds no <region>.pem: every AWS "
            "agent's proof would be refused; put AWS's certificates there (us-east-1.pem, "
            "...), or leave the setting unset for the ones costguard ships")
    out = []
    for path in found:
        try:
            out.append((path.stem, str(path), path.read_bytes()))
        except OSError as exc:
            raise IdentitySettingError(
                f"http.identity.aws_certs_dir: {path} cannot be read: {exc.strerror}"
            ) from None
    return out


class AwsDocuments:
    """Verifies EC2 instance identity documents with AWS's RSA certificates: those shipped
    with costguard (every region AWS lists), or, with `certs_dir`, that folder's instead."""

    def __init__(self, certs_dir: Path | None = None) -> None:
        from cryptography import x509

        self.certs: dict[str, Any] = {}
        if certs_dir is not None:
            pems = _named_pems(Path(certs_dir))
        else:
            shipped = resources.files("costguard.daemon").joinpath(SHIPPED_AWS_CERTS)
            pems = [(p.name.removesuffix(".pem"), p.name, p.read_bytes())
                    for p in sorted(shipped.iterdir(), key=lambda p: p.name)
                    if p.name.endswith(".pem")]
        for region, name, pem in pems:
            try:
                self.certs[region] = x509.load_pem_x509_certificate(pem)
            except ValueError:
                raise IdentitySettingError(
                    f"http.identity.aws_certs_dir: {name} is not a PEM certificate: put "
                    "AWS's RSA certificate for its region there, as AWS's page 'AWS public "
                    "certificates for instance identity document signatures' gives it"
                ) from None

    def verify(self, document: str, signature: str, now: datetime) -> Proven:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            doc = json.loads(document)
            iid, region = str(doc["instanceId"]), str(doc["region"])
            launched = utc(datetime.fromisoformat(str(doc["pendingTime"])))  # "Z" read
            raw = base64.b64decode("".join(signature.split()), validate=True)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProofRefused(f"not an instance identity document and signature: {exc}"
                               ) from None
        cert = self.certs.get(region) or self.certs.get("default")
        if cert is None:
            raise ProofRefused(
                f"no AWS certificate for region {region}: put AWS's RSA certificate for it "
                f"(AWS's page 'AWS public certificates for instance identity document "
                f"signatures') in a folder as {region}.pem, with the other regions' (costguard's "
                "own are in costguard/daemon/data/aws_identity_certs), and name the folder in "
                "http.identity.aws_certs_dir")
        try:
            cert.public_key().verify(raw, document.encode(), padding.PKCS1v15(),
                                     hashes.SHA256())
        except (InvalidSignature, TypeError, ValueError):
            raise ProofRefused("the document's signature does not verify against AWS's "
                               f"certificate for {region}") from None
        if launched > now + CLOCK_SKEW:
            raise ProofRefused(f"pendingTime {launched.isoformat()} is in the future")
        return Proven("aws", iid, region, launched)


@dataclass
class IdentityAuthority:
    """What the daemon's identity route and ingest need: the verifiers and the credentials."""

    credentials: Credentials
    aws: AwsDocuments
    gcp: GoogleTokens
    required: bool = False  # refuse shared-token pushes for cloud instances
    launch_time_of: Callable[[str, str], datetime | None] = lambda provider, iid: None

    def prove(self, body: Mapping[str, Any], now: datetime) -> Proven:
        provider = body.get("provider")
        if provider == "aws":
            document, signature = body.get("document"), body.get("signature")
            if not isinstance(document, str) or not isinstance(signature, str):
                raise ProofRefused("aws: send the identity document and its signature "
                                   "as strings")
            proven = self.aws.verify(document, signature, now)
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

    from costguard.daemon.bodies import BodyTooLarge, read_limited

    expected = f"Bearer {token}".encode()

    async def prove(request: Request) -> JSONResponse:
        given = request.headers.get("authorization", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            return JSONResponse({"error": "missing or wrong agent token"}, status_code=401)
        try:
            body = json.loads(await read_limited(request, 64 * 1024))
        except BodyTooLarge:
            return JSONResponse({"error": "proof over 64 KiB"}, status_code=413)
        except (ValueError, RecursionError, ClientDisconnect):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "expected a JSON object"}, status_code=400)
        now = clock()
        try:
            proven = await run_in_threadpool(authority.prove, body, now)
        except ProofRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except KeysUnavailable as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        credential, expires = authority.credentials.issue(proven.provider,
                                                          proven.instance_id, now)
        return JSONResponse({"credential": credential, "provider": proven.provider,
                             "instance_id": proven.instance_id,
                             "expires_at": expires.isoformat()})

    return [Route(IDENTITY_PATH, prove, methods=["POST"])]
