"""A real GCE instance identity token, signed by Google, verifies against Google's keys of its
day (a JWK set, as https://www.googleapis.com/oauth2/v3/certs served it), at the time it was
issued, by the daemon's own clock; and nothing else about it verifies: one changed byte,
another audience, the hour after it expired, a key set without its key. The recordings and
their provenance: tests/fixtures/identity/README.md."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from costguard.config import Settings
from costguard.daemon.google_tokens import GoogleTokens
from costguard.daemon.identity import KeysUnavailable, ProofRefused
from costguard.daemon.routes import identity_authority
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.fakes.loopback import serve

RECORDED = Path(__file__).parents[1] / "fixtures" / "identity" / "gcp"
KEYS = RECORDED / "google-v3-certs-2021-03.json"
TOKEN_TEXT = (RECORDED / "us-east1-b-instance-1.jwt").read_text(encoding="ascii")
AGENT_TOKEN = "shared-agent-token"


def _claims(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return decoded


CLAIMS = _claims(TOKEN_TEXT)
AUDIENCE = CLAIMS["aud"]  # the audience its agent asked the metadata server for
ISSUED = datetime.fromtimestamp(CLAIMS["iat"], UTC)
EXPIRES = datetime.fromtimestamp(CLAIMS["exp"], UTC)
IID = CLAIMS["google"]["compute_engine"]["instance_id"]


def _tokens(keys: Path = KEYS, audience: str = AUDIENCE) -> GoogleTokens:
    return GoogleTokens(audience, keys, "http://unused")


def test_the_recording_is_a_full_gce_identity_token() -> None:
    # format=full: the claims name the instance, its project and zone
    engine = CLAIMS["google"]["compute_engine"]
    assert CLAIMS["iss"] == "https://accounts.google.com"
    assert {"instance_id", "project_id", "zone"} <= set(engine)
    assert (EXPIRES - ISSUED).total_seconds() == 3600


def test_a_real_token_verifies_against_googles_keys_of_its_day() -> None:
    # by the daemon's clock, not the machine's: by the machine's it expired years ago
    assert datetime.now(UTC) > EXPIRES + timedelta(days=365)
    proven = _tokens().verify(TOKEN_TEXT, ISSUED + timedelta(minutes=1))
    assert (proven.provider, proven.instance_id, proven.region) == ("gcp", IID, "us-east1")
    # within its hour, and the clock skew either side
    for at in (ISSUED - timedelta(minutes=4), EXPIRES + timedelta(minutes=4)):
        assert _tokens().verify(TOKEN_TEXT, at).instance_id == IID


def test_the_keys_fetched_in_either_shape_google_serves_verify_it() -> None:
    jwks = json.loads(KEYS.read_text())
    fetched: list[str] = []

    def fetch(url: str) -> Any:
        fetched.append(url)
        return jwks

    tokens = GoogleTokens(AUDIENCE, None, "https://www.googleapis.com/oauth2/v3/certs",
                          fetch=fetch)
    for _ in range(2):
        assert tokens.verify(TOKEN_TEXT, ISSUED).instance_id == IID
    assert len(fetched) == 1  # cached


def test_the_keys_fetched_over_http_verify_it() -> None:
    # Google's v3 URL as a loopback server serves it: the daemon's own fetch, no stand-in
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    asked: list[str] = []

    async def certs(request: Request) -> Response:
        asked.append(request.url.path)
        return Response(KEYS.read_bytes(), media_type="application/json")

    with serve(Starlette(routes=[Route("/oauth2/v3/certs", certs)])) as url:
        tokens = GoogleTokens(AUDIENCE, None, f"{url}/oauth2/v3/certs")
        assert tokens.verify(TOKEN_TEXT, ISSUED).instance_id == IID
    assert asked == ["/oauth2/v3/certs"]


def test_a_key_server_that_does_not_answer_is_no_key_set_within_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a hung fetch would hold the agent's proof (and a worker thread) for as long as it hangs
    import socket
    import time

    import costguard.daemon.google_tokens as google_tokens

    monkeypatch.setattr(google_tokens, "KEYS_TIMEOUT_S", 0.3)
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/oauth2/v3/certs"
        started = time.monotonic()
        with pytest.raises(KeysUnavailable, match=r"could not be fetched from .*ReadTimeout"):
            GoogleTokens(AUDIENCE, None, url).verify(TOKEN_TEXT, ISSUED)
    assert time.monotonic() - started < 5


def test_one_changed_byte_of_a_real_token_does_not_verify() -> None:
    head, body, signature = TOKEN_TEXT.split(".")
    victim = dict(CLAIMS, google={"compute_engine": dict(
        CLAIMS["google"]["compute_engine"], instance_id="1111111111111111111")})
    forged_body = base64.urlsafe_b64encode(
        json.dumps(victim, separators=(",", ":")).encode()).rstrip(b"=").decode()
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    for forged in (f"{head}.{forged_body}.{signature}", f"{head}.{body}.{flipped}",
                   f"{head}.{body}.{signature[:-4]}"):
        assert forged != TOKEN_TEXT
        with pytest.raises(ProofRefused, match=r"^the identity token does not verify: "
                                               r"bad_signature \(bad signature\)$"):
            _tokens().verify(forged, ISSUED)


def test_a_header_the_library_does_not_type_check_is_refused_not_a_crash() -> None:
    # {"crit": null} made joserfc raise TypeError: the route answered 500 (found by
    # tests/reliability/test_reliability_identity_fuzz.py)
    head, body, signature = TOKEN_TEXT.split(".")
    header = json.loads(base64.urlsafe_b64decode(head + "=="))
    for extra in ({"crit": None}, {"crit": [1]}):
        forged = base64.urlsafe_b64encode(json.dumps(dict(header, **extra)).encode())
        token = f"{forged.rstrip(b'=').decode()}.{body}.{signature}"
        with pytest.raises(ProofRefused, match="does not verify"):
            _tokens().verify(token, ISSUED)


def test_a_real_token_outside_its_hour_or_for_another_audience_is_refused() -> None:
    for at, words in [(EXPIRES + timedelta(minutes=6), "expired"),
                      (ISSUED - timedelta(minutes=6), "issued in the future")]:
        with pytest.raises(ProofRefused, match=words):
            _tokens().verify(TOKEN_TEXT, at)
    with pytest.raises(ProofRefused, match="aud"):
        _tokens(audience="costguard").verify(TOKEN_TEXT, ISSUED)


def test_a_key_set_without_its_key_refuses_it(tmp_path: Path) -> None:
    # the snapshot's other key: a Google key, not the one that signed
    jwks = json.loads(KEYS.read_text())
    signer = json.loads(base64.urlsafe_b64decode(TOKEN_TEXT.split(".")[0] + "=="))["kid"]
    others = tmp_path / "others.json"
    others.write_text(json.dumps({"keys": [k for k in jwks["keys"] if k["kid"] != signer]}))
    with pytest.raises(ProofRefused, match=r"^the identity token is not signed by any of "
                                           r"Google's keys \(its key id is not among them\)$"):
        _tokens(others).verify(TOKEN_TEXT, ISSUED)
    # its modulus under the signer's key id: the signature does not hold
    swapped = tmp_path / "swapped.json"
    other = next(k for k in jwks["keys"] if k["kid"] != signer)
    swapped.write_text(json.dumps({"keys": [dict(other, kid=signer)]}))
    with pytest.raises(ProofRefused, match="does not verify"):
        _tokens(swapped).verify(TOKEN_TEXT, ISSUED)


def test_an_unknown_key_id_fetches_googles_keys_again_at_most_once_a_minute(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Google began signing with a key after the cache was filled: one more fetch, not a 403;
    # but a token naming a key Google never had does not fetch on every proof
    import costguard.daemon.google_tokens as google_tokens

    jwks = json.loads(KEYS.read_text())
    signer = json.loads(base64.urlsafe_b64decode(TOKEN_TEXT.split(".")[0] + "=="))["kid"]
    answers = [{"keys": [k for k in jwks["keys"] if k["kid"] != signer]}, jwks]
    fetched: list[str] = []

    def fetch(url: str) -> Any:
        fetched.append(url)
        return answers[min(len(fetched), len(answers)) - 1]

    tokens = GoogleTokens(AUDIENCE, None, "https://keys.example/certs", fetch=fetch)
    tokens.keys()  # the cache, filled before the new key
    with pytest.raises(ProofRefused, match="not signed by any of Google's keys"):
        tokens.verify(TOKEN_TEXT, ISSUED)  # the cache is under a minute old: no fetch
    assert len(fetched) == 1
    monkeypatch.setattr(google_tokens, "REFETCH_SECONDS", 0)  # a minute on
    assert tokens.verify(TOKEN_TEXT, ISSUED).instance_id == IID
    assert len(fetched) == 2


@pytest.fixture
def daemon_app(tmp_path: Path) -> Iterator[tuple[Any, MemorySink]]:
    """The daemon's telemetry and identity routes, given Google's keys of the token's day
    and the agent's audience, its clock a few minutes after the token was issued."""
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    sink = MemorySink()
    settings = Settings(database_url=db.url, http={"identity": {
        "google_certs_file": str(KEYS), "audience": AUDIENCE}})
    authority = identity_authority(settings, AGENT_TOKEN, db)
    yield telemetry_app(token=AGENT_TOKEN, sink=sink, identity=authority,
                        clock=lambda: ISSUED + timedelta(minutes=3)), sink
    db.dispose()


@pytest.fixture
def daemon(daemon_app: tuple[Any, MemorySink]) -> Iterator[tuple[httpx.Client, MemorySink]]:
    app, sink = daemon_app
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client, sink


def _minute(iid: str) -> dict[str, object]:
    return GpuMinute(provider="gcp", instance_id=iid, minute=ISSUED.replace(second=0),
                     source=TelemetrySource.AGENT, util_mean=0.0).model_dump(mode="json")


def test_a_daemon_given_googles_keys_binds_a_real_vm(
        daemon: tuple[httpx.Client, MemorySink]) -> None:
    client, sink = daemon
    shared = {"Authorization": f"Bearer {AGENT_TOKEN}"}

    answer = client.post("/v1/identity", headers=shared,
                         json={"provider": "gcp", "token": TOKEN_TEXT})

    assert answer.status_code == 200, answer.text
    assert answer.json()["instance_id"] == IID
    own = {"Authorization": f"Bearer {answer.json()['credential']}"}
    assert client.post("/v1/telemetry", headers=own, json=[_minute(IID)]).status_code == 200
    other = client.post("/v1/telemetry", headers=own, json=[_minute("1111111111111111111")])
    assert other.status_code == 403
    assert {k[1] for k in sink.rows} == {IID}
    forged = client.post("/v1/identity", headers=shared,
                         json={"provider": "gcp", "token": TOKEN_TEXT[:-3] + "AAA"})
    assert forged.status_code == 403 and "does not verify" in forged.json()["error"]


def test_an_agent_on_the_vm_proves_it_and_pushes_for_it_alone(
        tmp_path: Path, daemon_app: tuple[Any, MemorySink]) -> None:
    # the agent asks the metadata server for a full token for the daemon's audience, sends
    # it to the daemon, and pushes with the credential it gets back
    from costguard.clock import ManualClock
    from costguard.telemetry.agent import AgentSettings
    from costguard.telemetry.commands import run_agent
    from costguard.telemetry.nvml import NvmlSampler
    from tests.telemetry.fake_nvml import FakeGpu, FakeNvml
    from tests.telemetry.servers import metadata_app

    app, sink = daemon_app
    engine = CLAIMS["google"]["compute_engine"]
    meta, seen = metadata_app(
        gce={"instance/id": IID, "instance/name": engine["instance_name"],
             "instance/zone": f"projects/{engine['project_number']}/zones/{engine['zone']}",
             "project/project-id": engine["project_id"]},
        gce_tokens={(AUDIENCE, "full"): TOKEN_TEXT})
    clock = ManualClock(ISSUED)
    sampler = NvmlSampler(FakeNvml([FakeGpu(util=0, sm_util=0.0)]),
                          clock=lambda: clock.now().timestamp())
    sampler.open()
    with serve(meta) as meta_url, serve(app) as url:
        settings = AgentSettings(url=url, token=AGENT_TOKEN, gce_metadata_url=meta_url,
                                 ec2_metadata_url="http://127.0.0.1:9",
                                 identity_audience=AUDIENCE,
                                 buffer_path=tmp_path / "buffer.sqlite3")
        agent = run_agent(settings, sampler=sampler, clock=clock,
                          sleep=lambda s: clock.advance(timedelta(seconds=s)), max_ticks=130)
    assert f"identity for {AUDIENCE} (full)" in seen
    assert agent.pusher.auth == "instance credential"  # type: ignore[attr-defined]
    assert sink.rows and {k[1] for k in sink.rows} == {IID}


def test_a_keys_file_with_no_usable_key_is_no_key_set(tmp_path: Path) -> None:
    from costguard.daemon.google_tokens import google_keys

    for doc in ({"keys": [{"kty": "EC", "crv": "P-256", "kid": "e1"}]}, {"keys": "none"},
                ["not", "a", "set"]):
        with pytest.raises(KeysUnavailable, match="holds no Google keys"):
            google_keys(doc, "keys.json")
