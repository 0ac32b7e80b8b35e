"""Real EC2 instance identity documents, signed by AWS, verify against the certificates
costguard ships (costguard/daemon/data/aws_identity_certs): with no `aws_certs_dir` set, an
agent on a real EC2 instance proves its identity out of the box. The recordings and their
provenance: tests/fixtures/identity/README.md. One changed byte and they fail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from costguard.config import Settings
from costguard.daemon.aws_identity import AwsDocuments
from costguard.daemon.identity import ProofRefused
from costguard.daemon.routes import identity_authority
from costguard.model import GpuMinute, Instance, InstanceState, TelemetrySource
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.fakes.loopback import serve

RECORDED = Path(__file__).parents[1] / "fixtures" / "identity" / "aws"
NAMES = sorted(p.stem for p in RECORDED.glob("*.json"))
TOKEN = "shared-agent-token"


def _recorded(name: str) -> tuple[str, str, dict[str, str]]:
    document = (RECORDED / f"{name}.json").read_text(encoding="utf-8")
    signature = (RECORDED / f"{name}.sig").read_text(encoding="utf-8")
    return document, signature, json.loads(document)


def _launched(doc: dict[str, str]) -> datetime:
    return datetime.fromisoformat(doc["pendingTime"].replace("Z", "+00:00"))


def test_there_are_recordings_to_verify() -> None:
    assert len(NAMES) >= 2


@pytest.mark.parametrize("name", NAMES)
def test_a_real_document_verifies_against_the_shipped_certificate(name: str) -> None:
    document, signature, doc = _recorded(name)
    now = _launched(doc) + timedelta(days=30)

    proven = AwsDocuments().verify(document, signature, now)

    assert (proven.provider, proven.instance_id, proven.region, proven.launched) == (
        "aws", doc["instanceId"], doc["region"], _launched(doc))


@pytest.mark.parametrize("name", NAMES)
def test_one_changed_byte_of_a_real_document_does_not_verify(name: str) -> None:
    document, signature, doc = _recorded(name)
    now = _launched(doc) + timedelta(days=30)
    victim = doc["instanceId"][:-1] + ("0" if doc["instanceId"][-1] != "0" else "1")
    for forged in (document.replace(doc["instanceId"], victim),
                   document.replace('"instanceType" : "t2.micro"',
                                    '"instanceType" : "p5.48xlarge"'),
                   document + "\n"):
        assert forged != document
        with pytest.raises(ProofRefused, match="does not verify"):
            AwsDocuments().verify(forged, signature, now)


def test_a_folder_of_certificates_replaces_the_shipped_ones(tmp_path: Path) -> None:
    # an operator's aws_certs_dir is all that is trusted then: a real document does not
    # verify against a certificate that is not AWS's
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not-aws")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "us-east-1.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    document, signature, doc = _recorded(NAMES[0])
    with pytest.raises(ProofRefused, match="does not verify"):
        AwsDocuments(tmp_path).verify(document, signature, _launched(doc) + timedelta(days=1))


@pytest.mark.filterwarnings("ignore:DSA is deprecated")  # reads the dsa keys itself
def test_every_shipped_certificate_is_one_named_for_a_region() -> None:
    from cryptography.hazmat.primitives.asymmetric import dsa

    certs = AwsDocuments().certificates
    for kind, regions in certs.by_kind.items():
        assert len(regions) >= 30, kind
        for region, found in regions.items():
            assert region.count("-") >= 2 and region.split("-")[-1].isdigit(), region
            for c in found:
                allowed = (rsa.RSAPublicKey, dsa.DSAPublicKey) if kind == "dsa" else (
                    rsa.RSAPublicKey,)
                assert isinstance(c.cert.public_key(), allowed), (kind, region)
    assert {"us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1"} <= set(
        certs.by_kind["rsa"])


def _instance(doc: dict[str, str], launched: datetime) -> Instance:
    return Instance(provider="aws", account=doc["accountId"], region=doc["region"],
                    zone=doc["availabilityZone"], instance_id=doc["instanceId"],
                    name="recorded", instance_type=doc["instanceType"],
                    state=InstanceState.RUNNING, gpu_count=0, launch_time=launched,
                    observed_at=launched)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[httpx.Client, Database, MemorySink]]:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    sink = MemorySink()
    authority = identity_authority(Settings(database_url=db.url), TOKEN, db)  # no certs dir
    with serve(telemetry_app(token=TOKEN, sink=sink, identity=authority)) as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        yield client, db, sink
    db.dispose()


def _minute(iid: str) -> dict[str, object]:
    return GpuMinute(provider="aws", instance_id=iid, minute=datetime.now(UTC).replace(
        second=0, microsecond=0) - timedelta(minutes=1), source=TelemetrySource.AGENT,
        util_mean=0.0).model_dump(mode="json")


def test_a_daemon_with_the_default_settings_binds_a_real_instance(
        daemon: tuple[httpx.Client, Database, MemorySink]) -> None:
    client, db, sink = daemon
    document, signature, doc = _recorded(NAMES[0])
    with db.session() as s:
        record_inventory(s, "aws", [_instance(doc, _launched(doc))], datetime.now(UTC),
                         complete=True)
        s.commit()
    shared = {"Authorization": f"Bearer {TOKEN}"}

    answer = client.post("/v1/identity", headers=shared, json={
        "provider": "aws", "document": document, "signature": signature})

    assert answer.status_code == 200, answer.text
    assert answer.json()["instance_id"] == doc["instanceId"]
    own = {"Authorization": f"Bearer {answer.json()['credential']}"}
    assert client.post("/v1/telemetry", headers=own,
                       json=[_minute(doc["instanceId"])]).status_code == 200
    other = client.post("/v1/telemetry", headers=own, json=[_minute("i-0victim000000000")])
    assert other.status_code == 403
    assert {k[1] for k in sink.rows} == {doc["instanceId"]}


def test_a_real_document_of_an_earlier_launch_is_refused(
        daemon: tuple[httpx.Client, Database, MemorySink]) -> None:
    # the same instance id relaunched since: inventory's launch time is not the document's
    client, db, _ = daemon
    document, signature, doc = _recorded(NAMES[0])
    with db.session() as s:
        record_inventory(s, "aws", [_instance(doc, _launched(doc) + timedelta(days=3))],
                         datetime.now(UTC), complete=True)
        s.commit()
    answer = client.post("/v1/identity", headers={"Authorization": f"Bearer {TOKEN}"},
                         json={"provider": "aws", "document": document,
                               "signature": signature})
    assert answer.status_code == 403 and "earlier launch" in answer.json()["error"]
