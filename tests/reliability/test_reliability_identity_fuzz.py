"""Fuzzing the identity route (`POST /v1/identity`), with the shared agent token: any body,
any forged EC2 document or GCE token, gets a 4xx (400 malformed, 403 refused, 413 too
large), never a 5xx or a traceback, and never a credential. The verifiers are the daemon's
own: AWS's certificates as shipped, Google's keys of the recorded token's day."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from costguard.config import Settings
from costguard.daemon.routes import identity_authority
from costguard.store.db import Database
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.reliability import figures
from tests.telemetry.test_real_gce_identity_token import AUDIENCE, ISSUED, KEYS, TOKEN_TEXT

AGENT_TOKEN = "identity-fuzz-token"
RECORDED_AWS = Path(__file__).parents[1] / "fixtures" / "identity" / "aws"
NAME = "identity: fuzzed proofs answered 4xx saying why, no credential, no traceback"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('identity') / 'cg.db'}")
    cfg = Settings(database_url=db.url, http={"identity": {
        "google_certs_file": str(KEYS), "audience": AUDIENCE}})
    app = telemetry_app(token=AGENT_TOKEN, sink=MemorySink(),
                        identity=identity_authority(cfg, AGENT_TOKEN, db),
                        clock=lambda: ISSUED + timedelta(minutes=1))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    db.dispose()


def _post(client: TestClient, body: bytes) -> None:
    answer = client.post("/v1/identity", content=body, headers={
        "Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/json"})
    ok = (400 <= answer.status_code < 500 and "Traceback" not in answer.text
          and "credential" not in answer.text and _says_why(answer.text))
    figures.count(NAME, ok)
    assert ok, (answer.status_code, answer.text[:300])


def _says_why(text: str) -> bool:
    """A refusal is a JSON object whose `error` says why, for the agent's log."""
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), str) and bool(body["error"])


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=10)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    json_values,
    st.fixed_dictionaries({"provider": st.sampled_from(["aws", "gcp", "sim", "", None, 7])},
                          optional={"token": json_values, "document": json_values,
                                    "signature": json_values})))
def test_any_json_body_is_a_4xx(client: TestClient, body: Any) -> None:
    _post(client, json.dumps(body).encode())


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit", "jku", "x5u"]),
                              json_values, max_size=4),
       claims=st.dictionaries(st.sampled_from(["iss", "aud", "exp", "iat", "google", "sub"]),
                              json_values, max_size=6),
       signature=st.binary(max_size=300))
def test_forged_gce_tokens_are_refused(client: TestClient, header: dict[str, Any],
                                       claims: dict[str, Any], signature: bytes) -> None:
    # any header and claims, any signature: only Google's key signs a token that verifies
    token = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}." \
            f"{_b64(signature)}"
    _post(client, json.dumps({"provider": "gcp", "token": token}).encode())


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=0, max_value=len(TOKEN_TEXT) - 1),
       char=st.sampled_from("AQgw-_.=é\x00"))
def test_a_real_token_changed_anywhere_is_refused(client: TestClient, at: int,
                                                  char: str) -> None:
    forged = TOKEN_TEXT[:at] + char + TOKEN_TEXT[at + 1:]
    if forged == TOKEN_TEXT:
        return
    _post(client, json.dumps({"provider": "gcp", "token": forged}).encode())


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=json_values, signature=st.text(max_size=400))
def test_forged_ec2_documents_are_refused(client: TestClient, document: Any,
                                          signature: str) -> None:
    real = sorted(RECORDED_AWS.glob("*.sig"))[0].read_text()
    for sig in (signature, real):
        _post(client, json.dumps({"provider": "aws", "document": json.dumps(document),
                                  "signature": sig}).encode())


def test_raw_bytes_and_oversized_bodies_are_4xx(client: TestClient) -> None:
    for body in (b"", b"\xff\xfe", b"{" * 5000, b'{"provider": "gcp", "token": "' +
                 b"a" * 70_000 + b'"}', b"[" * 100_000 + b"]" * 100_000):
        _post(client, body)


def _doc(**fields: Any) -> str:
    base = {"instanceId": "i-0abc", "region": "us-east-1", "accountId": "1",
            "pendingTime": "2026-01-01T00:00:00Z"}
    return json.dumps({**base, **fields})


@pytest.mark.parametrize("body", [
    # a pendingTime at the edge of the calendar with an offset: OverflowError (a 500) before
    {"provider": "aws", "document": _doc(pendingTime="0001-01-01T00:00:00+05:00"),
     "signature": "QUJD"},
    {"provider": "aws", "document": _doc(pendingTime="9999-12-31T23:00:00-05:00"),
     "signature": "QUJD"},
    # a document of 30,000 "[": RecursionError before
    {"provider": "aws", "document": "[" * 30_000, "signature": "QUJD"},
    {"provider": "aws", "document": "[" * 30_000, "rsa2048": "QUJD"},
    {"provider": "aws", "rsa2048": base64.b64encode(b"\x30\x80" * 4000).decode()},
    {"provider": "aws", "pkcs7": "MA==", "document": _doc()},
    {"provider": "aws", "document": _doc(instanceId="i-\u0000"), "signature": "QUJD"},
])
def test_edge_of_the_calendar_and_deep_documents_are_4xx(client: TestClient,
                                                          body: dict[str, Any]) -> None:
    _post(client, json.dumps(body).encode())


def test_a_whole_body_with_a_long_number_or_nul_is_a_400(client: TestClient) -> None:
    for raw in (b'{"provider": "aws", "n": ' + b"9" * 5000 + b"}",
                b'{"provider": "aws\\u0000"}', b"[" * 30_000):
        answer = client.post("/v1/identity", content=raw, headers={
            "Authorization": f"Bearer {AGENT_TOKEN}"})
        assert answer.status_code == 400 and "body refused" in answer.json()["error"]
