"""GCE instance identity tokens, verified: the JWT the metadata server gives an agent
(`instance/service-accounts/default/identity?audience=...&format=full`), signed by Google.

- **Keys.** Google publishes its signing keys in two shapes, and either is taken, fetched or
  from a file (`google_certs_file`, for air-gapped installs): `{kid: certificate}`
  (https://www.googleapis.com/oauth2/v1/certs) or a JWK set, `{"keys": [...]}`
  (https://www.googleapis.com/oauth2/v3/certs). Fetched keys are cached for an hour; a token
  naming a key the cache does not hold (Google rotated its keys meanwhile) fetches them
  again, at most once a minute.
- **Checks** (joserfc): RS256 only (a token that names another algorithm, `none` or HS256
  over the public key, is refused), the signature by the key the token names, the issuer
  (Google's), the audience (`http.identity.audience`), the expiry and the issue time against
  the daemon's clock with 5 minutes of skew, and an instance id in the claims.

tests/telemetry/test_real_gce_identity_token.py verifies a token a real GCE VM was issued
against Google's keys of its day (tests/fixtures/identity/gcp/).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet, RSAKey

from costguard.clock import utc
from costguard.daemon.proofs import (
    CLOCK_SKEW,
    IdentitySettingError,
    KeysUnavailable,
    ProofRefused,
    Proven,
)
from costguard.small_files import read_small_text

GOOGLE_ISSUERS = ["https://accounts.google.com", "accounts.google.com"]
CACHE_SECONDS = 3600  # fetched keys are kept this long
REFETCH_SECONDS = 60  # an unknown key id fetches them again, at most this often
MAX_KEYS_BYTES = 2**20  # Google's keys are a few KiB
KEYS_TIMEOUT_S = 10.0  # a fetch of Google's keys gives up after this (the proof is a 503)
# what decoding a token anyone may send can raise: joserfc's own errors, and Python's for a
# header it does not check the type of ({"crit": null} raised TypeError, a 500 before)
_MALFORMED = (JoseError, ValueError, TypeError, KeyError, IndexError, AttributeError)
_SHAPES = ('{kid: certificate} (as https://www.googleapis.com/oauth2/v1/certs serves it) or '
           '{"keys": [JWK, ...]} (as https://www.googleapis.com/oauth2/v3/certs serves it)')


def google_keys(doc: Any, where: str) -> KeySet:
    """Google's RSA keys from a decoded JSON document in either shape Google serves; a
    document that holds none, or an entry that is no RSA key, is KeysUnavailable naming it."""
    if isinstance(doc, dict) and isinstance(doc.get("keys"), list):
        entries = [k for k in doc["keys"] if isinstance(k, dict) and k.get("kty") == "RSA"]
        try:
            keys = [RSAKey.import_key(k) for k in entries]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise KeysUnavailable(f"{where} holds a JWK that is no RSA key: {exc}") from None
    elif (isinstance(doc, dict) and doc and all(isinstance(v, str) for v in doc.values())
          and "keys" not in doc):
        keys = [_from_certificate(str(kid), pem, where) for kid, pem in doc.items()]
    else:
        keys = []
    if not keys or any(k.kid is None for k in keys):
        raise KeysUnavailable(f"{where} holds no Google keys with key ids: expected {_SHAPES}")
    return KeySet(list[Any](keys))


def _from_certificate(kid: str | None, pem: str, where: str) -> RSAKey:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    try:
        public = x509.load_pem_x509_certificate(pem.encode()).public_key()
    except ValueError:
        raise KeysUnavailable(f"{where}: {_named(kid)} is not a PEM certificate") from None
    if not isinstance(public, rsa.RSAPublicKey):
        raise KeysUnavailable(f"{where}: {_named(kid)} is not an RSA key")
    return RSAKey.import_key(public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        {"kid": kid} if kid else None)


def _named(kid: str | None) -> str:
    return f"key {kid}" if kid else "the certificate"


def _keys_file(path: Path) -> KeySet | RSAKey:
    """Google's keys from `path` (google_certs_file, or `costguard identity verify --keys`):
    either JSON shape Google serves, or one PEM certificate (the key a token is checked
    against whatever key id it names); KeysUnavailable says why not."""
    try:
        text = read_small_text(path, MAX_KEYS_BYTES)
    except OSError as exc:
        raise KeysUnavailable(f"{path} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KeysUnavailable(f"{path} is not text: expected {_SHAPES} or a PEM "
                              "certificate") from None
    if text.lstrip().startswith("-----BEGIN CERTIFICATE-----"):
        return _from_certificate(None, text, str(path))
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise KeysUnavailable(f"{path} is not JSON: {exc}") from None
    return google_keys(doc, str(path))


def decoded_claims(token: str) -> dict[str, Any]:
    """A token's claims, unverified (to explain a refusal); {} when they cannot be read."""
    import base64

    try:
        part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError, RecursionError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _fetch_json(url: str) -> Any:
    import httpx

    answer = httpx.get(url, timeout=KEYS_TIMEOUT_S)
    answer.raise_for_status()
    return answer.json()


class GoogleTokens:
    """Verifies GCE instance identity tokens against Google's keys."""

    def __init__(self, audience: str, certs_file: Path | None, certs_url: str,
                 fetch: Callable[[str], Any] | None = None) -> None:
        self.audience = audience
        self.certs_file = certs_file
        self.certs_url = certs_url
        self._fetch = fetch or _fetch_json
        self._cached: tuple[float, KeySet] | None = None
        self._lock = threading.Lock()
        if certs_file is not None:
            try:
                _keys_file(certs_file)
            except KeysUnavailable as exc:
                raise IdentitySettingError(
                    f"http.identity.google_certs_file: {exc}") from None

    def keys(self, older_than: float = CACHE_SECONDS) -> KeySet | RSAKey:
        """Google's keys: read from the file each time (a replaced file is taken), or the
        cached fetch when it is younger than `older_than` seconds."""
        if self.certs_file is not None:
            return _keys_file(self.certs_file)
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < older_than:
                return self._cached[1]
            try:
                doc = self._fetch(self.certs_url)
            except Exception as exc:
                raise KeysUnavailable(f"Google's keys could not be fetched from "
                                      f"{self.certs_url}: {type(exc).__name__}") from None
            keys = google_keys(doc, self.certs_url)
            self._cached = (time.monotonic(), keys)
            return keys

    def _decode(self, token: str) -> jwt.Token:
        try:
            return jwt.decode(token, self.keys(), algorithms=["RS256"])
        except InvalidKeyIdError:
            if self.certs_file is not None:
                raise
            # a key Google began signing with after the cache was filled
            return jwt.decode(token, self.keys(older_than=REFETCH_SECONDS),
                              algorithms=["RS256"])

    def _why(self, exc: Exception, claims: dict[str, Any]) -> str:
        """What a refused claim means, in the operator's terms (the claims are unverified:
        said only of a token whose signature held)."""
        from joserfc.errors import BadSignatureError, ExpiredTokenError, InvalidClaimError

        if isinstance(exc, BadSignatureError):
            return " (bad signature)"
        if isinstance(exc, ExpiredTokenError) and isinstance(claims.get("exp"), int):
            return (f" (expired "
                    f"{datetime.fromtimestamp(claims['exp'], UTC).isoformat()})")
        if isinstance(exc, InvalidClaimError) and exc.claim == "aud":
            return (f" (wrong audience: the token is for {claims.get('aud')!r}, this daemon "
                    f"expects {self.audience!r}, http.identity.audience)")
        return ""

    def verify(self, token: str, now: datetime) -> Proven:
        try:
            decoded = self._decode(token)
            jwt.JWTClaimsRegistry(
                now=int(utc(now).timestamp()), leeway=int(CLOCK_SKEW.total_seconds()),
                iss={"essential": True, "values": GOOGLE_ISSUERS},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True}, iat={"essential": True},
            ).validate(decoded.claims)
        except InvalidKeyIdError:
            raise ProofRefused("the identity token is not signed by any of Google's keys "
                               "(its key id is not among them)") from None
        except _MALFORMED as exc:  # joserfc's text: "bad_signature: " alone
            raise ProofRefused(f"the identity token does not verify: "
                               f"{str(exc).rstrip(': ') or type(exc).__name__}"
                               f"{self._why(exc, decoded_claims(token))}") from None
        google = decoded.claims.get("google")
        engine = google.get("compute_engine") if isinstance(google, dict) else None
        if not isinstance(engine, dict) or not (iid := engine.get("instance_id")):
            raise ProofRefused("the token carries no instance id: ask the metadata server "
                               "for it with format=full")
        zone = str(engine.get("zone") or "")
        project = engine.get("project_id")
        issued = decoded.claims.get("iat")
        return Proven("gcp", str(iid), zone.rsplit("-", 1)[0] if zone else None,
                      form="gce-token", verified_by=f"key {decoded.header.get('kid')}",
                      account=project if isinstance(project, str) else None,
                      zone=zone or None,
                      signed_at=(datetime.fromtimestamp(issued, UTC)
                                 if isinstance(issued, int) else None))
