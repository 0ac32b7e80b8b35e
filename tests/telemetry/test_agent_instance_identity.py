"""Telemetry bound to the instance that sent it: an agent proves its instance with the
cloud's signed identity (an EC2 identity document and its RSA signature, a GCE identity
token), gets a credential for that instance only, and the daemon refuses (403) summaries for
any other. Keys and certificates are generated here; nothing is trusted blindly."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from costguard.daemon.aws_identity import AwsDocuments
from costguard.daemon.google_tokens import GoogleTokens
from costguard.daemon.identity import Credentials, IdentityAuthority, ProofRefused
from costguard.model import GpuMinute, TelemetrySource
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.fakes.loopback import serve

TOKEN = "shared-agent-token"
NOW = datetime.now(UTC).replace(second=0, microsecond=0)
LAUNCHED = NOW - timedelta(days=2)


def _key_and_cert(name: str) -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(NOW - timedelta(days=1)).not_valid_after(NOW + timedelta(days=9))
            .sign(key, hashes.SHA256()))
    return key, cert.public_bytes(serialization.Encoding.PEM)


AWS_KEY, AWS_CERT = _key_and_cert("aws-test")
OTHER_KEY, OTHER_CERT = _key_and_cert("not-aws")
GOOGLE_KEY, GOOGLE_CERT = _key_and_cert("google-test")


def _document(iid: str = "i-0feedface", region: str = "eu-west-1",
              launched: datetime = LAUNCHED) -> str:
    return json.dumps({"instanceId": iid, "region": region, "accountId": "123456789012",
                       "pendingTime": launched.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "availabilityZone": f"{region}a", "instanceType": "g5.xlarge"},
                      indent=2)


def _sign(document: str, key: rsa.RSAPrivateKey = AWS_KEY) -> str:
    raw = key.sign(document.encode(), padding.PKCS1v15(), hashes.SHA256())
    return base64.b64encode(raw).decode()


def _gce_token(iid: str = "4242", aud: str | None = "costguard", exp_in: int = 3600,
               with_instance: bool = True, **changed: Any) -> str:
    """A token as Google signs them (with GOOGLE_KEY, key id k1), issued at NOW; `changed`
    claims replace Google's (None: left out)."""
    from google.auth import crypt, jwt

    signer = crypt.RSASigner.from_string(GOOGLE_KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()), key_id="k1")
    now = int(NOW.timestamp())
    claims: dict[str, Any] = {"iss": "https://accounts.google.com", "aud": aud,
                              "iat": now, "exp": now + exp_in, "sub": "1234"}
    if with_instance:
        claims["google"] = {"compute_engine": {"instance_id": iid, "project_id": "ml-prod",
                                               "zone": "us-central1-a"}}
    claims.update(changed)
    return jwt.encode(signer, {k: v for k, v in claims.items() if v is not None}).decode()


@pytest.fixture
def authority(tmp_path: Path) -> IdentityAuthority:
    certs = tmp_path / "aws-certs"
    certs.mkdir()
    (certs / "default.pem").write_bytes(AWS_CERT)
    keys = tmp_path / "google-certs.json"
    keys.write_text(json.dumps({"k1": GOOGLE_CERT.decode()}))
    return IdentityAuthority(
        credentials=Credentials(TOKEN), aws=AwsDocuments(certs),
        gcp=GoogleTokens("costguard", keys, "http://unused"),
        launch_time_of=lambda provider, iid: LAUNCHED if iid == "i-0feedface" else None)


def test_a_signed_document_proves_its_instance_and_nothing_else(
        authority: IdentityAuthority) -> None:
    doc = _document()
    proven = authority.prove({"provider": "aws", "document": doc, "signature": _sign(doc)},
                             NOW)
    assert (proven.provider, proven.instance_id, proven.region) == (
        "aws", "i-0feedface", "eu-west-1")
    tampered = doc.replace("i-0feedface", "i-0victim00")
    for body, words in [
        ({"provider": "aws", "document": tampered, "signature": _sign(doc)}, "does not verify"),
        ({"provider": "aws", "document": doc, "signature": _sign(doc, OTHER_KEY)},
         "does not verify"),
        ({"provider": "aws", "document": doc, "signature": "not base64!"},
         "the signature body is not base64"),
        ({"provider": "aws", "document": "{}", "signature": _sign("{}")},
         "the identity document has no instanceId"),
        ({"provider": "aws", "document": _document(launched=LAUNCHED - timedelta(days=30)),
          "signature": _sign(_document(launched=LAUNCHED - timedelta(days=30)))},
         "earlier launch"),
        ({"provider": "sim"}, "provider must be aws or gcp"),
    ]:
        with pytest.raises(ProofRefused, match=words):
            authority.prove(body, NOW)


def test_a_region_without_a_certificate_is_refused(tmp_path: Path) -> None:
    certs = tmp_path / "only-us"
    certs.mkdir()
    (certs / "us-east-1.pem").write_bytes(AWS_CERT)
    # a region costguard ships no certificate for (an isolated partition's), nor the folder
    doc = _document(region="us-isob-east-1")
    with pytest.raises(ProofRefused, match="no AWS rsa certificate for region us-isob-east-1: "
                       r"copy it .* as rsa/us-isob-east-1.pem .* http.identity.aws_certs_dir"):
        AwsDocuments(certs).verify(doc, _sign(doc), NOW)
    # a region the folder names replaces the shipped certificate (the generated key verifies)
    doc = _document(region="us-east-1")
    assert AwsDocuments(certs).verify(doc, _sign(doc), NOW).instance_id == "i-0feedface"


def test_a_google_identity_token_proves_its_instance(authority: IdentityAuthority) -> None:
    proven = authority.prove({"provider": "gcp", "token": _gce_token()}, NOW)
    assert (proven.provider, proven.instance_id, proven.region) == ("gcp", "4242", "us-central1")
    zoneless = _gce_token(google={"compute_engine": {"instance_id": "4243"}})
    proven = authority.prove({"provider": "gcp", "token": zoneless}, NOW)
    assert (proven.instance_id, proven.region) == ("4243", None)
    for token, words in [(_gce_token(aud="someone-else"), "does not verify: .*aud"),
                         (_gce_token(exp_in=-3600), "does not verify: .*expired"),
                         (_gce_token(iss="https://evil.example"), "does not verify: .*iss"),
                         (_gce_token(iss=None), "does not verify: .*iss"),
                         (_gce_token(aud=None), "does not verify: .*aud"),
                         (_gce_token(exp=None), "does not verify: .*exp"),
                         (_gce_token(iat=None), "does not verify: .*iat"),
                         (_gce_token(google="a string"), "no instance id"),
                         (_gce_token(with_instance=False),
                          "^the token carries no instance id: ask the metadata server for it "
                          "with format=full$")]:
        with pytest.raises(ProofRefused, match=words):
            authority.prove({"provider": "gcp", "token": token}, NOW)


def test_a_token_that_names_another_algorithm_is_refused(authority: IdentityAuthority) -> None:
    # HS256 "signed" with Google's public certificate as the secret (the classic confusion),
    # or no signature at all: only RS256 by Google's key proves anything
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    body = _gce_token().split(".")[1]
    hs256, none = b64(b'{"alg":"HS256","kid":"k1"}'), b64(b'{"alg":"none","kid":"k1"}')
    mac = hmac.new(GOOGLE_CERT, f"{hs256}.{body}".encode(), hashlib.sha256).digest()
    forged, unsigned = f"{hs256}.{body}.{b64(mac)}", f"{none}.{body}."
    for token in (forged, unsigned):
        with pytest.raises(ProofRefused, match="does not verify"):
            authority.prove({"provider": "gcp", "token": token}, NOW)


def test_credentials_are_bound_expire_and_cannot_be_forged() -> None:
    creds = Credentials(TOKEN)
    token, expires = creds.issue("aws", "i-1", NOW)
    assert creds.check(token, NOW) == ("aws", "i-1")
    assert creds.check(token, expires + timedelta(seconds=1)) is None
    head, _payload, mac = token.split(".")
    forged = base64.urlsafe_b64encode(json.dumps(
        {"p": "aws", "i": "i-victim", "exp": 9e9}).encode()).decode().rstrip("=")
    assert creds.check(f"{head}.{forged}.{mac}", NOW) is None
    assert Credentials("another-daemon-token").check(token, NOW) is None
    assert creds.check(token, expires) is None  # expired at its expiry, not a second later
    for malformed in ("cgi1", "cgi1.only", f"{token}.more", f"cgi2.{_payload}.{mac}", ""):
        assert creds.check(malformed, NOW) is None, malformed


def test_a_credential_is_told_from_the_shared_token_by_its_prefix() -> None:
    token, _ = Credentials(TOKEN).issue("gcp", "4242", NOW)
    assert Credentials.looks_like(token)
    for other in (TOKEN, "cgi1", "cgi1-abc", "xcgi1.abc"):
        assert not Credentials.looks_like(other), other


def test_a_credential_is_the_same_bytes_in_every_release() -> None:
    # replicas of a rolling upgrade check each other's credentials: the key derivation and
    # the encoding are a wire format (an HMAC-SHA256 of the payload, keyed by HMAC-SHA256
    # of a fixed label under the agent token; base64url without padding)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    token, _ = Credentials("t0ken").issue("aws", "i-1", at)
    key = hmac.new(b"t0ken", b"costguard-instance-credential-v1", hashlib.sha256).digest()
    payload = base64.urlsafe_b64encode(
        b'{"p": "aws", "i": "i-1", "exp": 1767229200}').rstrip(b"=").decode()
    mac = base64.urlsafe_b64encode(
        hmac.new(key, payload.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    assert token == f"cgi1.{payload}.{mac}"
    assert "=" not in token


def test_a_document_launched_in_the_future_or_a_signature_with_junk_is_refused(
        authority: IdentityAuthority) -> None:
    # pendingTime past the daemon's clock and its skew: no instance was launched then
    ahead = _document(launched=NOW + timedelta(minutes=5, seconds=1))
    with pytest.raises(ProofRefused, match="is in the future"):
        authority.prove({"provider": "aws", "document": ahead, "signature": _sign(ahead)}, NOW)
    edge = _document(iid="i-0edge", launched=NOW + timedelta(minutes=5))
    assert authority.prove({"provider": "aws", "document": edge, "signature": _sign(edge)},
                           NOW).instance_id == "i-0edge"
    # characters outside base64 are refused, not skipped over (line breaks are AWS's own)
    doc = _document()
    signature = _sign(doc)
    with pytest.raises(ProofRefused, match="the signature body is not base64"):
        authority.prove({"provider": "aws", "document": doc,
                         "signature": signature[:20] + "!" + signature[20:]}, NOW)
    wrapped = "\n".join(signature[i:i + 64] for i in range(0, len(signature), 64))
    assert authority.prove({"provider": "aws", "document": doc, "signature": wrapped},
                           NOW).instance_id == "i-0feedface"


def test_a_document_of_a_launch_a_second_off_is_the_same_launch_two_are_not(
        authority: IdentityAuthority) -> None:
    # inventory's LaunchTime and the document's pendingTime are both whole seconds
    for off, same in ((timedelta(seconds=1), True), (timedelta(seconds=2), False)):
        doc = _document(launched=LAUNCHED + off)
        body = {"provider": "aws", "document": doc, "signature": _sign(doc)}
        if same:
            assert authority.prove(body, NOW).instance_id == "i-0feedface"
        else:
            with pytest.raises(ProofRefused, match="earlier launch"):
                authority.prove(body, NOW)


def test_a_proof_whose_parts_are_not_text_is_refused_saying_what_to_send(
        authority: IdentityAuthority) -> None:
    doc = _document()
    for body, text in [
        ({"provider": "aws", "document": doc, "signature": 7},
         "aws: send the identity document and its signed bodies (rsa2048, signature or "
         "pkcs7, as IMDS serves them) as strings"),
        ({"provider": "aws", "document": {"instanceId": "i-1"}, "signature": _sign(doc)},
         "aws: send the identity document and its signed bodies (rsa2048, signature or "
         "pkcs7, as IMDS serves them) as strings"),
        ({"provider": "aws", "document": doc},
         "aws: this daemon accepts the rsa2048, signature forms (http.identity.aws_forms); "
         "the agent sent none"),
        ({"provider": "gcp", "token": ["a", "b"]},
         "gcp: send the instance identity token as a string"),
        ({"provider": "azure"}, "provider must be aws or gcp (the simulated cloud and hosts "
                                "outside a cloud use the shared token)"),
    ]:
        with pytest.raises(ProofRefused) as refused:
            authority.prove(body, NOW)
        assert str(refused.value) == text


def _minute(iid: str, provider: str = "aws") -> dict[str, Any]:
    return GpuMinute(provider=provider, instance_id=iid,  # type: ignore[arg-type]
                     minute=NOW - timedelta(minutes=1), source=TelemetrySource.AGENT,
                     util_mean=0.0, sm_mean=0.0).model_dump(mode="json")


@pytest.fixture
def daemon(authority: IdentityAuthority) -> Iterator[tuple[httpx.Client, MemorySink]]:
    sink = MemorySink()
    with serve(telemetry_app(token=TOKEN, sink=sink, identity=authority)) as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        yield client, sink


def _credential(client: httpx.Client) -> str:
    doc = _document()
    answer = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                         json={"provider": "aws", "document": doc, "signature": _sign(doc)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["instance_id"] == "i-0feedface"
    expires = datetime.fromisoformat(answer.json()["expires_at"])
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    return str(answer.json()["credential"])


def test_an_agent_reports_only_for_its_own_instance(
        daemon: tuple[httpx.Client, MemorySink]) -> None:
    client, sink = daemon
    own = {"Authorization": f"Bearer {_credential(client)}"}
    assert client.post("/v1/telemetry", headers=own,
                       json=[_minute("i-0feedface")]).status_code == 200
    forged = client.post("/v1/telemetry", headers=own,
                         json=[_minute("i-0feedface"), _minute("i-0victim00")])
    assert forged.status_code == 403 and forged.json()["index"] == 1
    assert "proved it runs on aws:i-0feedface, not aws:i-0victim00" in forged.json()["error"]
    assert {k[1] for k in sink.rows} == {"i-0feedface"}  # nothing of the forged batch


def test_the_identity_route_refuses_without_the_agent_token_or_a_valid_proof(
        daemon: tuple[httpx.Client, MemorySink]) -> None:
    client, _ = daemon
    doc = _document()
    proof = {"provider": "aws", "document": doc, "signature": _sign(doc, OTHER_KEY)}
    assert client.post("/v1/identity", json=proof).status_code == 401
    refused = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                          json=proof)
    assert refused.status_code == 403 and "does not verify" in refused.json()["error"]
    assert client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                       content=b"[" * 50).status_code == 400
    # a proof is at most 64 KiB: a body a byte longer is not read (an EC2 document and its
    # signature are ~2 KB, a GCE token ~1 KB)
    padded = json.dumps(dict(proof, pad="x" * (64 * 1024))).encode()[:64 * 1024 + 1]
    assert client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                       content=padded).status_code == 413
    fits = json.dumps(dict(proof, pad="")).encode()
    fits = fits[:-1] + b" " * (64 * 1024 - len(fits)) + b"}"
    assert len(fits) == 64 * 1024
    assert client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                       content=fits).status_code == 403  # read, and refused on its merits
    junk = client.post("/v1/telemetry", headers={"Authorization": "Bearer cgi1.x.y"},
                       json=[_minute("i-0feedface")])
    assert junk.status_code == 401 and "prove the instance again" in junk.json()["error"]


def test_required_mode_refuses_the_shared_token_for_cloud_instances(
        authority: IdentityAuthority) -> None:
    authority.required = True
    sink = MemorySink()
    with serve(telemetry_app(token=TOKEN, sink=sink, identity=authority)) as url:
        shared = {"Authorization": f"Bearer {TOKEN}"}
        refused = httpx.post(f"{url}/v1/telemetry", headers=shared, json=[_minute("i-1")])
        assert refused.status_code == 403 and "must prove their identity" in refused.text
        assert httpx.post(f"{url}/v1/telemetry", headers=shared,
                          json=[_minute("i-sim1", "sim")]).status_code == 200


def test_the_agent_proves_its_instance_and_pushes_with_the_credential(
        authority: IdentityAuthority, tmp_path: Path) -> None:
    from costguard.clock import ManualClock
    from costguard.telemetry.agent import AgentSettings
    from costguard.telemetry.commands import run_agent
    from tests.telemetry.fake_nvml import FakeGpu, FakeNvml
    from tests.telemetry.servers import metadata_app

    doc = _document()
    meta, seen = metadata_app(ec2={
        "instance-id": "i-0feedface", "placement/availability-zone": "eu-west-1a",
        "dynamic/instance-identity/document": doc,
        "dynamic/instance-identity/signature": _sign(doc)})
    sink = MemorySink()
    clock = ManualClock(NOW)
    from costguard.telemetry.nvml import NvmlSampler

    sampler = NvmlSampler(FakeNvml([FakeGpu(util=0, sm_util=0.0)]),
                          clock=lambda: clock.now().timestamp())
    sampler.open()
    with serve(meta) as meta_url, serve(telemetry_app(
            token=TOKEN, sink=sink, identity=authority, clock=lambda: NOW)) as url:
        settings = AgentSettings(url=url, token=TOKEN, ec2_metadata_url=meta_url,
                                 gce_metadata_url="http://127.0.0.1:9",
                                 buffer_path=tmp_path / "buffer.sqlite3")
        agent = run_agent(settings, sampler=sampler, clock=clock,
                          sleep=lambda s: clock.advance(timedelta(seconds=s)), max_ticks=130)
    assert agent.pusher.auth == "instance credential"  # type: ignore[attr-defined]
    assert "GET /latest/dynamic/instance-identity/signature" in seen
    assert sink.rows and {k[1] for k in sink.rows} == {"i-0feedface"}


def test_googles_keys_are_fetched_once_an_hour_and_an_outage_is_a_503(
        authority: IdentityAuthority) -> None:
    from costguard.daemon.identity import KeysUnavailable

    fetched: list[str] = []

    def fetch(url: str) -> dict[str, str]:
        fetched.append(url)
        return {"k1": GOOGLE_CERT.decode()}

    tokens = GoogleTokens("costguard", None, "https://keys.example/certs", fetch=fetch)
    for _ in range(3):
        assert tokens.verify(_gce_token(), NOW).instance_id == "4242"
    assert fetched == ["https://keys.example/certs"]  # cached, not asked per proof

    def down(url: str) -> dict[str, str]:
        raise OSError("unreachable")

    authority.gcp = GoogleTokens("costguard", None, "https://keys.example/certs", fetch=down)
    with pytest.raises(KeysUnavailable):
        authority.prove({"provider": "gcp", "token": _gce_token()}, NOW)
    with serve(telemetry_app(token=TOKEN, sink=MemorySink(), identity=authority)) as url:
        answer = httpx.post(f"{url}/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                            json={"provider": "gcp", "token": _gce_token()})
    assert answer.status_code == 503
    assert answer.json()["error"] == ("Google's keys could not be fetched from "
                                      "https://keys.example/certs: OSError")
    # an answer with no key in it (a proxy's error page as JSON, say) is no key set: 503
    authority.gcp = GoogleTokens("costguard", None, "https://keys.example/certs",
                                 fetch=lambda url: {"error": {"code": 403}})
    with pytest.raises(KeysUnavailable, match=r"^https://keys.example/certs holds no Google"):
        authority.prove({"provider": "gcp", "token": _gce_token()}, NOW)


# -- certificates http.identity names that cannot serve: the daemon does not start --------
def test_an_aws_certs_dir_that_cannot_serve_is_refused_naming_the_setting(
        tmp_path: Path) -> None:
    from costguard.daemon.identity import IdentitySettingError

    with pytest.raises(IdentitySettingError, match=r"aws_certs_dir: .*nowhere is not a folder"):
        AwsDocuments(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "us-east-1.crt").write_bytes(AWS_CERT)  # not named <region>.pem
    with pytest.raises(IdentitySettingError, match=r"holds no <region>\.pem"):
        AwsDocuments(empty)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "default.pem").write_bytes(AWS_CERT)
    (broken / "eu-west-1.pem").write_text("-----BEGIN CERTIFICATE-----\nnot one\n")
    with pytest.raises(IdentitySettingError, match=r"eu-west-1\.pem is not a PEM certificate"):
        AwsDocuments(broken)


def test_a_google_certs_file_that_cannot_serve_is_refused_and_one_gone_later_is_503(
        authority: IdentityAuthority, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    from costguard.daemon.identity import IdentitySettingError

    ec_key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ec")])
    ec_cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(ec_key.public_key()).serial_number(1)
               .not_valid_before(NOW - timedelta(days=1))
               .not_valid_after(NOW + timedelta(days=9)).sign(ec_key, hashes.SHA256()))
    ec_pem = ec_cert.public_bytes(serialization.Encoding.PEM).decode()
    for text, words in [(None, "cannot be read"), ("{", "is not JSON"),
                        (json.dumps({"k9": ec_pem}), "key k9 is not an RSA key"),
                        ("[]", "holds no Google keys"), ("{}", "holds no Google keys"),
                        ('{"k1": 7}', "holds no Google keys"),
                        ('{"keys": []}', "holds no Google keys"),
                        ('{"k1": "not a certificate"}', "key k1 is not a PEM certificate"),
                        ('{"keys": [{"kty": "RSA", "kid": "k1", "n": "!", "e": "AQAB"}]}',
                         "holds a JWK that is no RSA key")]:
        keys = tmp_path / "keys.json"
        keys.unlink(missing_ok=True)
        if text is not None:
            keys.write_text(text)
        with pytest.raises(IdentitySettingError,
                           match=f"google_certs_file: .*keys.json:? {words}"):
            GoogleTokens("costguard", keys, "http://unused")
    # a file read well at start and removed later: no data for now (503), not a crash (500)
    assert isinstance(authority.gcp, GoogleTokens) and authority.gcp.certs_file is not None
    authority.gcp.certs_file.unlink()
    with serve(telemetry_app(token=TOKEN, sink=MemorySink(), identity=authority)) as url:
        answer = httpx.post(f"{url}/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                            json={"provider": "gcp", "token": _gce_token()})
    assert answer.status_code == 503 and "cannot be read" in answer.json()["error"]


def _cms(document: str, key: rsa.RSAPrivateKey, cert: x509.Certificate) -> str:
    """A CMS SignedData embedding `document`, signed attributes and no certificate, as IMDS
    writes its /pkcs7 body in China's regions (RSA-2048), made by cryptography."""
    from cryptography.hazmat.primitives.serialization import pkcs7

    der = (pkcs7.PKCS7SignatureBuilder().set_data(document.encode())
           .add_signer(cert, key, hashes.SHA256())
           .sign(serialization.Encoding.DER, [pkcs7.PKCS7Options.Binary,
                                              pkcs7.PKCS7Options.NoCerts,
                                              pkcs7.PKCS7Options.NoCapabilities]))
    return base64.b64encode(der).decode()


def test_china_s_pkcs7_form_is_rsa_and_verifies_where_pkcs7_is_accepted(
        tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ec2.amazonaws.com.cn")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(0x5EED)
            .not_valid_before(NOW - timedelta(days=1)).not_valid_after(NOW + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "dsa").mkdir()
    (tmp_path / "dsa" / "cn-north-1.pem").write_bytes(cert.public_bytes(
        serialization.Encoding.PEM))
    doc = _document(region="cn-north-1")
    body = _cms(doc, key, cert)
    accepting = AwsDocuments(tmp_path, ("rsa2048", "signature", "pkcs7"))
    proven = accepting.verify(None, body, NOW, "pkcs7")
    assert (proven.instance_id, proven.form, proven.region) == (
        "i-0feedface", "pkcs7", "cn-north-1")
    assert proven.verified_by == str(tmp_path / "dsa" / "cn-north-1.pem")
    # the same body through the default forms: refused, naming what this daemon accepts
    with pytest.raises(ProofRefused, match="does not accept the pkcs7 form"):
        AwsDocuments(tmp_path).verify(None, body, NOW, "pkcs7")
    # another key with the same name and serial: the signature does not hold
    other = _cms(doc, OTHER_KEY, cert)
    with pytest.raises(ProofRefused, match=r"\(bad signature\)"):
        accepting.verify(None, other, NOW, "pkcs7")
    # a signer another serial names is not the region's certificate
    stranger = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(0xBAD)
                .not_valid_before(NOW - timedelta(days=1))
                .not_valid_after(NOW + timedelta(days=1)).sign(key, hashes.SHA256()))
    with pytest.raises(ProofRefused, match="signer \\(serial BAD\\) is not AWS's dsa"):
        accepting.verify(None, _cms(doc, key, stranger), NOW, "pkcs7")
