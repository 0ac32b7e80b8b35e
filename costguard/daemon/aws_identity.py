"""EC2 instance identity documents, verified in each of the three forms IMDS signs them:

- `signature` (IMDS `.../instance-identity/signature`): base64 RSA PKCS#1 v1.5 with SHA-256
  over the document's exact bytes; certificate kind `rsa` (RSA-1024).
- `rsa2048` (`.../rsa2048`): base64 CMS SignedData embedding the document, RSA with SHA-256
  over the signed attributes; kind `rsa2048`.
- `pkcs7` (`.../pkcs7`): the same layout, DSA with SHA-1; kind `dsa` (DSA-1024; China's
  regions publish an RSA-2048 certificate in this slot).

Certificates are chosen by the document's `region` and tried by public key: AWS reissues a
region's certificate keeping its key (2024, 2026), so neither the certificate's bytes nor its
validity period decide anything. The CMS bodies embed no certificate; their signer is named by
issuer and serial, which must be a certificate of the region's. For CMS the `messageDigest`
attribute must match the embedded document and the signature must verify over the signed
attributes; the embedded document is the one read.

The certificates costguard ships (`data/aws_identity_certs/`, its README says whence) serve
unless `http.identity.aws_certs_dir` holds the region's own: a region there replaces the
shipped certificates of its kind, and a region costguard does not ship is added
(`aws_certificates.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from costguard.clock import utc
from costguard.daemon.aws_certificates import KIND_OF, Certificate, CertificateSet, hush_dsa
from costguard.daemon.proofs import (
    CLOCK_SKEW,
    ProofRefused,
    Proven,
    timestamp,
)

AwsForm = Literal["signature", "rsa2048", "pkcs7"]
AWS_FORMS: tuple[AwsForm, ...] = ("rsa2048", "signature", "pkcs7")
MAX_BODY_CHARS = 16 * 1024  # a real body is under 2 KiB; a document under 1 KiB

_DIGESTS = {  # CMS digestAlgorithm OIDs
    "1.3.14.3.2.26": "sha1", "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384", "2.16.840.1.101.3.4.2.3": "sha512",
}
_RSA_SIGNATURES = {"1.2.840.113549.1.1.1", "1.2.840.113549.1.1.5", "1.2.840.113549.1.1.11",
                   "1.2.840.113549.1.1.12", "1.2.840.113549.1.1.13"}
_DSA_SIGNATURES = {"1.2.840.10040.4.1", "1.2.840.10040.4.3", "2.16.840.1.101.3.4.3.2"}
_SIGNED_DATA = "1.2.840.113549.1.7.2"
_DATA = "1.2.840.113549.1.7.1"
_CONTENT_TYPE = "1.2.840.113549.1.9.3"
_MESSAGE_DIGEST = "1.2.840.113549.1.9.4"
_SIGNING_TIME = "1.2.840.113549.1.9.5"
_ALGORITHM_PROTECTION = "1.2.840.113549.1.9.52"


def body_bytes(text: str, what: str) -> bytes:
    """The DER of a base64 body as IMDS serves it (lines of 76), PEM-armoured or not."""
    if len(text) > MAX_BODY_CHARS:
        raise ProofRefused(f"{what} is over {MAX_BODY_CHARS} characters; IMDS's are under 2 KiB")
    lines = [ln.strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("-----")]
    try:
        return base64.b64decode("".join(lines), validate=True)
    except (ValueError, binascii.Error):
        raise ProofRefused(f"{what} is not base64") from None


def read_document(raw: bytes) -> dict[str, Any]:
    """The identity document's fields; ProofRefused when it is not one."""
    from costguard.daemon.bodies import BodyRefused, parse_json

    try:
        doc = parse_json(raw)
    except BodyRefused as exc:
        raise ProofRefused(f"the identity document is refused: {exc}") from None
    if not isinstance(doc, dict):
        raise ProofRefused("the identity document is not a JSON object")
    for field in ("instanceId", "region", "pendingTime"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            raise ProofRefused(f"the identity document has no {field}")
    return doc


@dataclass(frozen=True)
class SignedData:
    """What a CMS SignedData body from IMDS says, parsed but not yet verified."""

    content: bytes  # the embedded identity document
    issuer_der: bytes
    serial: int
    digest: str  # hashlib name
    signature_oid: str
    signature: bytes
    signed_attrs_der: tuple[bytes, ...]  # the SET OF the signature covers (DER)
    message_digest: bytes | None
    content_type: str | None
    signing_time: datetime | None
    protected_digest: str | None  # CMSAlgorithmProtection's digest algorithm, if present


def parse_signed_data(der: bytes) -> SignedData:
    """A CMS SignedData (RFC 5652) as IMDS writes it: BER with indefinite lengths, one signer
    named by issuer and serial, the document embedded, signed attributes (asn1crypto)."""
    from asn1crypto import cms

    try:
        info = cms.ContentInfo.load(der, strict=True)
        if info["content_type"].dotted != _SIGNED_DATA:
            raise ProofRefused("the CMS body is not SignedData")
        signed = info["content"]
        encap = signed["encap_content_info"]
        content = encap["content"].native if encap["content"] else None
        if encap["content_type"].dotted != _DATA or not isinstance(content, bytes):
            raise ProofRefused("the CMS body embeds no document")
        signers = signed["signer_infos"]
        if len(signers) != 1:
            raise ProofRefused(f"the CMS body has {len(signers)} signers; AWS's have one")
        signer = signers[0]
        if signer["sid"].name != "issuer_and_serial_number":
            raise ProofRefused("the CMS signer is not named by issuer and serial")
        attrs = signer["signed_attrs"]
        if not attrs:
            raise ProofRefused("the CMS body has no signed attributes")
        values: dict[str, Any] = {}
        for attr in attrs:
            oid = attr["type"].dotted
            if oid in values or len(attr["values"]) != 1:
                raise ProofRefused(f"the CMS signed attribute {oid} is not single-valued")
            values[oid] = attr["values"][0]
        protected = values.get(_ALGORITHM_PROTECTION)
        protected_oid = protected["digest_algorithm"]["algorithm"].dotted if protected else None
        # the signature covers the attributes as a SET OF in DER (RFC 5652 5.4): AWS's own
        # bytes retagged, and asn1crypto's DER of them should a body carry them in BER
        retagged = bytearray(attrs.dump())
        retagged[0] = 0x31
        der_forms = (bytes(retagged), attrs.untag().dump(force=True))
        sid = signer["sid"].chosen
        digest_oid = signer["digest_algorithm"]["algorithm"].dotted
        return SignedData(
            content=content,
            issuer_der=sid["issuer"].dump(),
            serial=int(sid["serial_number"].native),
            digest=_DIGESTS.get(digest_oid, digest_oid),
            signature_oid=signer["signature_algorithm"]["algorithm"].dotted,
            signature=bytes(signer["signature"].native),
            signed_attrs_der=tuple(dict.fromkeys(der_forms)),
            message_digest=(bytes(values[_MESSAGE_DIGEST].native)
                            if _MESSAGE_DIGEST in values else None),
            content_type=(values[_CONTENT_TYPE].dotted if _CONTENT_TYPE in values else None),
            signing_time=(_asn1_time(values[_SIGNING_TIME].native)
                          if _SIGNING_TIME in values else None),
            protected_digest=_DIGESTS.get(protected_oid, protected_oid) if protected_oid else None)
    except ProofRefused:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise ProofRefused(f"the CMS body does not parse: {type(exc).__name__}") from None


def _asn1_time(value: object) -> datetime | None:
    return utc(value) if isinstance(value, datetime) else None


def _verify_with(cert: Certificate, signature: bytes, data: bytes, digest: str,
                 family: str) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import dsa, padding, rsa

    hush_dsa()
    algorithm = {"sha1": hashes.SHA1(), "sha256": hashes.SHA256(), "sha384": hashes.SHA384(),
                 "sha512": hashes.SHA512()}.get(digest)
    if algorithm is None:
        return False
    key = cert.cert.public_key()
    try:
        if family == "rsa" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, padding.PKCS1v15(), algorithm)
        elif family == "dsa" and isinstance(key, dsa.DSAPublicKey):
            key.verify(signature, data, algorithm)
        else:
            return False
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


class AwsDocuments:
    """Verifies EC2 instance identity documents, in the forms `forms` allows, against the
    shipped certificates (and `certs_dir`'s, which add regions or replace a region's)."""

    def __init__(self, certs_dir: Path | None = None,
                 forms: Sequence[str] = ("rsa2048", "signature")) -> None:
        self.certificates = CertificateSet(certs_dir)
        self.forms = tuple(forms)

    def verify_offered(self, document: str | None, offered: dict[str, str],
                       now: datetime) -> Proven:
        """The first form of `forms` (this daemon's order of preference) that an agent
        offered, verified; a proof in a form that fails is refused, whatever else came."""
        for form in self.forms:
            if form in offered:
                return self.verify(document, offered[form], now, form)
        sent = ", ".join(offered) or "none"
        raise ProofRefused(f"aws: this daemon accepts the {', '.join(self.forms)} forms "
                           f"(http.identity.aws_forms); the agent sent {sent}")

    def verify(self, document: str | None, signature: str, now: datetime,
               form: str = "signature") -> Proven:
        """`signature`: the body of IMDS's `/signature`, `/rsa2048` or `/pkcs7` (per `form`);
        `document`: the document's exact bytes (required for `signature`; for the CMS forms,
        when given, it must be the one embedded)."""
        if form not in KIND_OF:
            raise ProofRefused(f"form must be one of {', '.join(AWS_FORMS)}, not {form!r}")
        if form not in self.forms:
            raise ProofRefused(
                f"this daemon does not accept the {form} form (http.identity.aws_forms: "
                f"{', '.join(self.forms)}); the agent sends rsa2048 by default")
        if document is not None and len(document) > MAX_BODY_CHARS:
            raise ProofRefused("the identity document is over 16 KiB; IMDS's are under 1 KiB")
        raw = body_bytes(signature, f"the {form} body")
        if form == "signature":
            if document is None:
                raise ProofRefused("the signature form needs the document it signs")
            return self._verify_signature(document.encode(), raw, now)
        return self._verify_cms(form, raw, None if document is None else document.encode(), now)

    def _verify_signature(self, document: bytes, raw: bytes, now: datetime) -> Proven:
        doc = read_document(document)
        region = str(doc["region"])
        for cert in self.certificates.for_region("rsa", region):
            if _verify_with(cert, raw, document, "sha256", "rsa"):
                return self._proven(doc, "signature", cert, None, now)
        raise ProofRefused("the document's signature does not verify against AWS's "
                           f"certificate for {region}")

    def _verify_cms(self, form: str, raw: bytes, document: bytes | None,
                    now: datetime) -> Proven:
        signed = parse_signed_data(raw)
        if document is not None and document != signed.content:
            raise ProofRefused(f"the document sent is not the one the {form} body embeds")
        doc = read_document(signed.content)
        region = str(doc["region"])
        if signed.content_type not in (None, _DATA):
            raise ProofRefused("the CMS contentType attribute is not data")
        if signed.digest not in ("sha1", "sha256", "sha384", "sha512"):
            raise ProofRefused(f"the CMS digest algorithm {signed.digest} is not one AWS uses")
        if signed.protected_digest is not None and signed.protected_digest != signed.digest:
            raise ProofRefused("the CMS algorithm protection names another digest algorithm")
        if signed.message_digest is None or signed.message_digest != hashlib.new(
                signed.digest, signed.content).digest():
            raise ProofRefused(f"the {form} body's messageDigest does not match the document "
                               "it embeds (digest mismatch)")
        family = ("rsa" if signed.signature_oid in _RSA_SIGNATURES else
                  "dsa" if signed.signature_oid in _DSA_SIGNATURES else None)
        if family is None:
            raise ProofRefused(f"the CMS signature algorithm {signed.signature_oid} is not "
                               "one AWS uses")
        kind = KIND_OF[form]
        held = self.certificates.named(kind, region)
        if not held:
            raise self.certificates.missing(kind, region)
        named = [c for c in held if c.cert.serial_number == signed.serial
                 and c.cert.issuer.public_bytes() == signed.issuer_der]
        if not named:
            raise ProofRefused(
                f"the {form} body's signer (serial {signed.serial:X}) is not AWS's {kind} "
                f"certificate for {region}")
        for cert in named:
            if any(_verify_with(cert, signed.signature, attrs, signed.digest, family)
                   for attrs in signed.signed_attrs_der):
                return self._proven(doc, form, cert, signed.signing_time, now)
        raise ProofRefused(f"the {form} body's signature does not verify against AWS's "
                           f"{kind} certificate for {region} (bad signature)")

    @staticmethod
    def _proven(doc: dict[str, Any], form: str, cert: Certificate,
                signed_at: datetime | None, now: datetime) -> Proven:
        launched = timestamp(doc["pendingTime"], "pendingTime")
        if launched > now + CLOCK_SKEW:
            raise ProofRefused(f"pendingTime {launched.isoformat()} is in the future")
        account = doc.get("accountId")
        zone = doc.get("availabilityZone")
        return Proven("aws", str(doc["instanceId"]), str(doc["region"]), launched, form=form,
                      verified_by=cert.name,
                      account=account if isinstance(account, str) else None,
                      zone=zone if isinstance(zone, str) else None, signed_at=signed_at)
