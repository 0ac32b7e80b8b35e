"""Every real EC2 identity document (in each signed form it was published with) and every real
GCE identity token in tests/fixtures/identity/real (copied byte for byte from
shared/fixtures/identity; its SOURCES.tsv says whence) verifies through the daemon's own
verifier at its own issue time, through POST /v1/identity with an inventory that knows the
instance and its launch, and through `costguard identity verify`; one changed byte anywhere
is refused with its reason, and so is another region's certificate."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.config import Settings
from costguard.daemon.aws_certificates import SHIPPED_AWS_CERTS, CertificateSet
from costguard.daemon.aws_identity import AwsDocuments, body_bytes, parse_signed_data
from costguard.daemon.google_tokens import GoogleTokens
from costguard.daemon.proofs import ProofRefused
from costguard.daemon.routes import identity_authority
from costguard.model import Instance, InstanceState
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import AgentProofRow
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.fakes.loopback import serve

REAL = Path(__file__).parents[1] / "fixtures" / "identity" / "real"
SHARED = Path(__file__).parents[3] / "shared" / "fixtures" / "identity"
ALL_FORMS = ("rsa2048", "signature", "pkcs7")
TOKEN = "shared-agent-token"


@dataclass(frozen=True)
class Sample:
    folder: str
    form: str
    document: str | None  # the separate document, where one was published
    body: str

    @property
    def doc(self) -> dict[str, str]:
        text = self.document
        if text is None:
            text = parse_signed_data(body_bytes(self.body, "body")).content.decode()
        return dict(json.loads(text))

    @property
    def launched(self) -> datetime:
        return datetime.fromisoformat(self.doc["pendingTime"])

    @property
    def id(self) -> str:
        return f"{self.folder}/{self.form}"


def _samples() -> list[Sample]:
    out = []
    for folder in sorted((REAL / "aws-iid").iterdir()):
        document = folder / "document"
        for form in ALL_FORMS:
            if (folder / form).exists():
                out.append(Sample(folder.name, form,
                                  document.read_text() if document.exists() else None,
                                  (folder / form).read_text()))
    return out


SAMPLES = _samples()
TOKENS = {  # token file: (key file, audience)
    "kops-admin_us-central1-c_2019-04-17.jwt": (
        "oauth2-v3-certs_2019-04_smallstep-cli.json", "gcp:Kops Provisioner"),
    "instance-1_us-east1-b_2021-03-24.jwt": (
        "oauth2-v3-certs_2021-03_GoogleIdTokenVerifier.json",
        "https://subscription.rhsm.redhat.com:443/subscription"),
}


def test_the_copies_are_the_shared_material_byte_for_byte() -> None:
    sources = {line.split("\t")[0]: line.split("\t")[1] for line in
               (REAL / "SOURCES.tsv").read_text().splitlines()[1:] if line}
    import hashlib

    checked = 0
    for path in sorted(p for p in REAL.rglob("*") if p.is_file() and p.name != "SOURCES.tsv"):
        rel = str(path.relative_to(REAL)).replace("aws-iid/", "aws/iid/")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sources[rel], rel
        checked += 1
    shipped = Path(__file__).parents[2] / "costguard" / "daemon" / SHIPPED_AWS_CERTS
    for path in sorted(shipped.rglob("*.pem")):
        rel = "aws/certs/" + str(path.relative_to(shipped))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sources[rel], rel
        checked += 1
    assert checked == len([k for k in sources if not k.endswith(("README.md", "verify.py"))])
    if SHARED.exists():  # the fixtures' own folder, where this checkout has it beside it
        assert (SHARED / "SOURCES.tsv").read_bytes() == (REAL / "SOURCES.tsv").read_bytes()


def test_every_form_of_every_region_is_shipped() -> None:
    certs = CertificateSet()
    assert len(certs.regions("rsa")) == len(certs.regions("rsa2048")) == 39
    assert len(certs.regions("dsa")) == 36  # no public copy for 3 regions (README)
    assert {"ap-east-2", "ap-southeast-6", "eusc-de-east-1"}.isdisjoint(certs.regions("dsa"))
    # the 2014 certificate that served 17 regions is kept with each, by its key
    legacy = [c for c in certs.named("rsa", "us-east-1") if c.name.startswith("legacy/")]
    assert [c.name for c in legacy] == ["legacy/rsa/ec2.amazonaws.com_2014-06-05_2024-06-05.pem"]
    # ... but tried once: one key, one try
    assert len(certs.for_region("rsa", "us-east-1")) == 1


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_a_real_document_verifies_at_its_own_time(sample: Sample) -> None:
    at = sample.launched + timedelta(minutes=10)
    proven = AwsDocuments(forms=ALL_FORMS).verify(sample.document, sample.body, at,
                                                   sample.form)
    doc = sample.doc
    assert (proven.instance_id, proven.region, proven.account, proven.zone, proven.form) == (
        doc["instanceId"], doc["region"], doc["accountId"], doc["availabilityZone"],
        sample.form)
    kind = {"signature": "rsa", "rsa2048": "rsa2048", "pkcs7": "dsa"}[sample.form]
    assert proven.verified_by == f"{kind}/{doc['region']}.pem"
    if sample.form != "signature":  # CMS: signed a few seconds after the launch
        assert proven.signed_at is not None
        assert timedelta(0) <= proven.signed_at - sample.launched < timedelta(minutes=5)
    # a CMS body embeds the document: it proves the same alone
    if sample.form != "signature" and sample.document is not None:
        alone = AwsDocuments(forms=ALL_FORMS).verify(None, sample.body, at, sample.form)
        assert alone == proven


def test_documents_signed_under_the_2014_certificate_verify_with_today_s() -> None:
    # both were signed while ec2.amazonaws.com (2014-2024) was the certificate of their
    # regions; AWS reissued per-region certificates with the same key
    signed_2014 = [s for s in SAMPLES if s.form == "signature"]
    assert {s.doc["region"] for s in signed_2014} == {"us-east-1", "ap-southeast-2"}
    for sample in signed_2014:
        proven = AwsDocuments().verify(sample.document, sample.body, sample.launched,
                                       "signature")
        assert proven.verified_by == f"rsa/{sample.doc['region']}.pem"
        assert datetime(2024, 4, 29, tzinfo=UTC) <= _not_before(proven.verified_by)


def _not_before(name: str) -> datetime:
    for c in CertificateSet().by_kind["rsa"][name.split("/")[1].removesuffix(".pem")]:
        if c.name == name:
            return c.cert.not_valid_before_utc  # type: ignore[no-any-return]
    raise AssertionError(name)


def _flip(text: str, at: int) -> str:
    return text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1:]


def _flip_b64(text: str) -> str:
    """One base64 letter near the middle changed to another (still base64)."""
    at = len(text) // 2
    while not text[at].isalpha():
        at += 1
    return text[:at] + ("B" if text[at] == "A" else "A") + text[at + 1:]


def _rebody(der: bytes) -> str:
    return base64.b64encode(der).decode()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_one_changed_byte_anywhere_is_refused_with_its_reason(sample: Sample) -> None:
    verifier = AwsDocuments(forms=ALL_FORMS)
    at = sample.launched + timedelta(minutes=10)
    if sample.document is not None:  # the document itself: a digit of the account id
        changed = sample.document.replace(sample.doc["accountId"],
                                          _flip(sample.doc["accountId"], 3))
        reason = ("does not verify" if sample.form == "signature" else
                  "the document sent is not the one the")
        with pytest.raises(ProofRefused, match=reason):
            verifier.verify(changed, sample.body, at, sample.form)
    der = body_bytes(sample.body, "body")
    if sample.form == "signature":
        tampered = bytearray(der)
        tampered[len(der) // 2] ^= 1
        with pytest.raises(ProofRefused, match="does not verify against AWS's certificate"):
            verifier.verify(sample.document, _rebody(bytes(tampered)), at, "signature")
        return
    signed = parse_signed_data(der)
    # the embedded document: its digest no longer matches messageDigest
    start = der.index(signed.content)
    tampered = bytearray(der)
    tampered[start + 20] ^= 1
    with pytest.raises(ProofRefused, match=r"messageDigest does not match .*\(digest mismatch\)"):
        verifier.verify(None, _rebody(bytes(tampered)), at, sample.form)
    # a signed attribute (a digit of signingTime): the signature no longer holds
    when = der.index(b"\x17\x0d")  # UTCTime, 13 characters
    tampered = bytearray(der)
    tampered[when + 12] ^= 1
    with pytest.raises(ProofRefused, match=r"signature does not verify .* \(bad signature\)"):
        verifier.verify(None, _rebody(bytes(tampered)), at, sample.form)
    # the signature itself
    where = der.index(signed.signature)
    tampered = bytearray(der)
    tampered[where + len(signed.signature) // 2] ^= 1
    with pytest.raises(ProofRefused, match=r"\(bad signature\)"):
        verifier.verify(None, _rebody(bytes(tampered)), at, sample.form)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_another_region_s_certificate_does_not_verify_it(sample: Sample,
                                                         tmp_path: Path) -> None:
    # af-south-1 has keys of its own in every kind: put them where the document's region's are
    kind = {"signature": "rsa", "rsa2048": "rsa2048", "pkcs7": "dsa"}[sample.form]
    shipped = Path(__file__).parents[2] / "costguard" / "daemon" / SHIPPED_AWS_CERTS
    (tmp_path / kind).mkdir()
    (tmp_path / kind / f"{sample.doc['region']}.pem").write_bytes(
        (shipped / kind / "af-south-1.pem").read_bytes())
    reason = ("does not verify against AWS's certificate" if kind == "rsa" else
              f"signer \\(serial [0-9A-F]+\\) is not AWS's {kind} certificate")
    with pytest.raises(ProofRefused, match=reason):
        AwsDocuments(tmp_path, ALL_FORMS).verify(sample.document, sample.body,
                                                 sample.launched, sample.form)


def test_without_dsa_in_cryptography_the_daemon_starts_and_says_why_pkcs7_fails(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """cryptography says it will drop DSA: then a DSA key cannot be read, which was every
    daemon's failure to start (AWS's `dsa` certificates are shipped and loaded). Each is
    left out with one warning for all; rsa2048 and signature verify as before; a pkcs7
    proof is refused saying why and what to send instead."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.x509.oid import PublicKeyAlgorithmOID

    from costguard.daemon import aws_certificates

    real = aws_certificates._key_der

    def without_dsa(cert: Any) -> bytes:
        if cert.public_key_algorithm_oid == PublicKeyAlgorithmOID.DSA:
            raise UnsupportedAlgorithm("DSA is not supported by this backend")
        return real(cert)

    monkeypatch.setattr(aws_certificates, "_key_der", without_dsa)
    with caplog.at_level("WARNING", logger="costguard.daemon.aws_certificates"):
        docs = AwsDocuments(forms=ALL_FORMS)
    certs = docs.certificates
    # China's regions publish an RSA-2048 certificate in the dsa slot: those stay
    assert certs.regions("dsa") == ["cn-north-1", "cn-northwest-1"]
    assert len(certs.regions("rsa")) == len(certs.regions("rsa2048")) == 39
    left = [r.getMessage() for r in caplog.records]
    assert len(left) == 1 and left[0].startswith("34 AWS dsa certificates left out"), left
    for sample in SAMPLES:
        at = sample.launched + timedelta(minutes=10)
        region = sample.doc["region"]
        if sample.form != "pkcs7":
            assert docs.verify(sample.document, sample.body, at, sample.form).region == region
            continue
        with pytest.raises(ProofRefused, match=(
                f"AWS's dsa certificate for region {region} \\(dsa/{region}.pem\\) cannot be "
                "read by the installed cryptography .*send the rsa2048 form")):
            docs.verify(sample.document, sample.body, at, sample.form)
    assert any(s.form == "pkcs7" for s in SAMPLES)


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_a_real_gce_token_verifies_at_its_own_time_and_not_once_changed(name: str) -> None:
    keys, audience = TOKENS[name]
    token = (REAL / "gce" / "tokens" / name).read_text().strip()
    tokens = GoogleTokens(audience, REAL / "gce" / "keys" / keys, "http://unused")
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    issued = datetime.fromtimestamp(claims["iat"], UTC)
    proven = tokens.verify(token, issued + timedelta(minutes=5))
    engine = claims["google"]["compute_engine"]
    assert (proven.instance_id, proven.zone, proven.account, proven.form, proven.signed_at) == (
        engine["instance_id"], engine["zone"], engine["project_id"], "gce-token", issued)
    with pytest.raises(ProofRefused, match=r"expired .*\)$"):
        tokens.verify(token, issued + timedelta(hours=2))
    with pytest.raises(ProofRefused, match="wrong audience"):
        GoogleTokens("costguard", REAL / "gce" / "keys" / keys, "http://unused").verify(
            token, issued)
    head, payload, signature = token.split(".")
    for changed in (f"{head}.{_flip(payload, 10)}.{signature}",
                    f"{head}.{payload}.{_flip(signature, 40)}"):
        with pytest.raises(ProofRefused, match="does not verify"):
            tokens.verify(changed, issued)


# -- end to end: POST /v1/identity on a daemon with the default settings ----------------

@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[httpx.Client, Database, list[datetime]]]:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    clock = [datetime.now(UTC)]
    settings = Settings(database_url=db.url)
    authority = identity_authority(settings, TOKEN, db)
    assert authority.required  # a new install requires proof
    app = telemetry_app(token=TOKEN, sink=MemorySink(), identity=authority,
                        clock=lambda: clock[0])
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client, db, clock
    db.dispose()


def _known(db: Database, doc: dict[str, str], launched: datetime) -> None:
    with db.session() as s:
        record_inventory(s, "aws", [Instance(
            provider="aws", account=doc["accountId"], region=doc["region"],
            zone=doc["availabilityZone"], instance_id=doc["instanceId"], name="recorded",
            instance_type=doc.get("instanceType", "t2.micro"), state=InstanceState.RUNNING,
            gpu_count=0, launch_time=launched, observed_at=launched)], launched,
            complete=False)
        s.commit()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_a_real_document_proves_its_instance_at_the_daemon(
        sample: Sample, daemon: tuple[httpx.Client, Database, list[datetime]]) -> None:
    client, db, clock = daemon
    _known(db, sample.doc, sample.launched)
    clock[0] = sample.launched + timedelta(minutes=10)
    proof: dict[str, str] = {"provider": "aws", sample.form: sample.body}
    if sample.document is not None:
        proof["document"] = sample.document
    answer = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                         json=proof)
    if sample.form == "pkcs7":  # DSA-1024/SHA-1: accepted only where aws_forms names it
        assert answer.status_code == 403
        assert answer.json()["error"] == (
            "aws: this daemon accepts the rsa2048, signature forms (http.identity.aws_forms); "
            "the agent sent pkcs7")
        return
    assert answer.status_code == 200, answer.text
    assert answer.json()["instance_id"] == sample.doc["instanceId"]
    with db.session() as s:
        row = s.get(AgentProofRow, ("aws", sample.doc["instanceId"]))
        assert row is not None and (row.form, row.verified_by) == (
            sample.form, f"{'rsa' if sample.form == 'signature' else 'rsa2048'}/"
                         f"{sample.doc['region']}.pem")
    # relaunched since (inventory knows a later launch): the document is a replay
    _known(db, sample.doc, sample.launched + timedelta(days=1))
    replay = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                         json=proof)
    assert replay.status_code == 403 and "earlier launch" in replay.json()["error"]


def test_the_agent_s_whole_proof_is_judged_by_its_strongest_form(
        daemon: tuple[httpx.Client, Database, list[datetime]]) -> None:
    client, db, clock = daemon
    folder = REAL / "aws-iid" / "ap-southeast-2_2026-02-16_i-0c5541936caf78c12"
    document = (folder / "document").read_text()
    doc = json.loads(document)
    launched = datetime.fromisoformat(doc["pendingTime"])
    _known(db, doc, launched)
    clock[0] = launched + timedelta(minutes=1)
    proof = {"provider": "aws", "document": document,
             "rsa2048": (folder / "rsa2048").read_text(),
             "signature": (folder / "signature").read_text()}
    assert client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                       json=proof).status_code == 200
    with db.session() as s:
        row = s.get(AgentProofRow, ("aws", doc["instanceId"]))
        assert row is not None and row.form == "rsa2048"
    # a broken rsa2048 is refused even beside a good signature: no falling back to weaker
    proof["rsa2048"] = _flip_b64(proof["rsa2048"])
    refused = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                          json=proof)
    assert refused.status_code == 403


# -- costguard identity verify ------------------------------------------------------------

def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["identity", "verify", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_the_offline_check_verifies_every_real_document(sample: Sample, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "body").write_text(sample.body)
    at = (sample.launched + timedelta(minutes=10)).isoformat()
    if sample.document is not None:
        (tmp_path / "document").write_text(sample.document)
        code, out = _cli("document", "--signature", "body", "--at", at, "--format", "json")
    else:
        code, out = _cli("body", "--at", at, "--format", "json")
    assert code == 0, out
    answer = json.loads(out)
    assert answer["verified"] is True
    assert (answer["provider"], answer["instance_id"], answer["region"], answer["account"],
            answer["form"]) == ("aws", sample.doc["instanceId"], sample.doc["region"],
                                sample.doc["accountId"], sample.form)
    assert answer["accepted_by_daemon"] is (sample.form != "pkcs7")
    assert answer["verified_by"].endswith(f"/{sample.doc['region']}.pem")
    # one changed byte: exit 1 and the reason
    (tmp_path / "body").write_text(_flip_b64(sample.body))
    args = ["document", "--signature", "body"] if sample.document is not None else ["body"]
    code, out = _cli(*args, "--at", at, "--format", "json")
    assert code == 1, out
    assert json.loads(out)["verified"] is False and json.loads(out)["reason"]


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_the_offline_check_verifies_every_real_token(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    keys, audience = TOKENS[name]
    token = REAL / "gce" / "tokens" / name
    key_file = REAL / "gce" / "keys" / keys
    claims = json.loads(base64.urlsafe_b64decode(token.read_text().split(".")[1] + "=="))
    at = datetime.fromtimestamp(claims["iat"] + 60, UTC).isoformat()
    code, out = _cli(str(token), "--keys", str(key_file), "--audience", audience, "--at", at,
                     "--format", "json")
    assert code == 0, out
    answer = json.loads(out)
    engine = claims["google"]["compute_engine"]
    assert (answer["verified"], answer["provider"], answer["instance_id"], answer["zone"],
            answer["project"], answer["form"]) == (
        True, "gcp", engine["instance_id"], engine["zone"], engine["project_id"], "gce-token")
    header = json.loads(base64.urlsafe_b64decode(token.read_text().split(".")[0] + "=="))
    assert answer["verified_by"] == f"key {header['kid']}"
    code, out = _cli(str(token), "--keys", str(key_file), "--audience", "costguard",
                     "--at", at)
    assert code == 1 and "wrong audience" in out
    code, out = _cli(str(token), "--keys", str(key_file), "--audience", audience)
    assert code == 1 and "expired" in out  # judged now by default: long expired


def test_the_offline_check_says_what_it_cannot_read(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello, world\n")
    (tmp_path / "doc.json").write_text('{"instanceId": "i-1"}')
    (tmp_path / "big").write_text("A" * 70_000)
    for args, words in [
        (["nowhere"], "FILE nowhere: No such file or directory"),
        (["notes.txt"], "is no EC2 identity document, /pkcs7 or /rsa2048 body, or GCE"),
        (["doc.json"], "give its /signature, /rsa2048 or /pkcs7 body with --signature"),
        (["big"], "is over 64 KiB"),
        (["doc.json", "--signature", "doc.json", "--at", "yesterday"], "--at 'yesterday' is "
                                                                       "not a time"),
    ]:
        code, out = _cli(*args)
        assert code == 2, (args, out)
        assert words in " ".join(out.split()), (args, out)
