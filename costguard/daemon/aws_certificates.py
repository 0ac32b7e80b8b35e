"""AWS's certificates for instance identity documents, by kind and region.

Each of the three forms IMDS signs a document in has its kind of certificate: `signature`
RSA-1024 (`rsa`), `rsa2048` RSA-2048 (`rsa2048`), `pkcs7` DSA-1024 (`dsa`; China's regions
publish an RSA-2048 certificate in that slot). costguard ships them (`data/aws_identity_certs/`,
its README says whence) with the certificates AWS replaced that still sign for a region's key
(`legacy/`); `http.identity.aws_certs_dir` adds regions or replaces a region's of a kind.
Verifying a document against them: `aws_identity.py`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from costguard.daemon.proofs import IdentitySettingError, ProofRefused
from costguard.small_files import read_small

MAX_PEM_BYTES = 2**20  # a region's certificate is 1-2 KiB

log = logging.getLogger(__name__)

KIND_OF: dict[str, str] = {"signature": "rsa", "rsa2048": "rsa2048", "pkcs7": "dsa"}  # form -> kind
SHIPPED_AWS_CERTS = "data/aws_identity_certs"  # in this package; its README says whence


def hush_dsa() -> None:
    """AWS signs the `pkcs7` form with DSA, and cryptography (51 does) warns on each use of a
    DSA key that it will drop DSA. Verifying AWS's signature is no choice of ours, and the
    warning, printed on the daemon's stderr, is one the operator can do nothing about: it is
    kept out, for this module and aws_identity's alone. Put (back) first in the filters
    before each use, as whatever reset them since (a `catch_warnings` that ended) may have
    taken it out."""
    warnings.filterwarnings("ignore", message="DSA is deprecated", category=Warning,
                            module=r"costguard\.daemon\.aws_(certificates|identity)\Z")


@dataclass(frozen=True)
class Certificate:
    """One AWS certificate: where it came from (for the proof's record) and what it holds."""

    name: str  # e.g. "rsa2048/us-west-2.pem", or a path under aws_certs_dir
    cert: Any  # cryptography.x509.Certificate
    key_der: bytes  # SubjectPublicKeyInfo: certificates with one key are tried once


def _key_der(cert: Any) -> bytes:
    """A certificate's public key as DER (SubjectPublicKeyInfo); cryptography's
    UnsupportedAlgorithm where the installed one cannot read the key (it says it will drop
    DSA, the key of AWS's `dsa` certificates)."""
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_key().public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo))


def _load_pems(name: str, pem: bytes, setting: str,
               unreadable: list[tuple[str, str]]) -> list[Certificate]:
    """The certificates of one PEM file; those whose key the installed cryptography cannot
    read are left out, (name, why) added to `unreadable`."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm

    hush_dsa()

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise IdentitySettingError(
            f"{setting}: {name} is not a PEM certificate: put AWS's certificate for its "
            "region there, as AWS's page 'AWS public certificates for instance identity "
            "document signatures' gives it") from None
    held = []
    for c in certs:
        try:
            held.append(Certificate(name, c, _key_der(c)))
        except UnsupportedAlgorithm as exc:
            unreadable.append((name, str(exc) or type(exc).__name__))
    return held


class CertificateSet:
    """AWS's certificates by kind (rsa, rsa2048, dsa) and region.

    A certificate whose key the installed cryptography cannot read (it says it will drop
    DSA: then every `dsa` one) is left out, with one warning for all: the daemon starts, the
    other kinds verify as before, and a proof that needs the kind is refused saying why."""

    def __init__(self, certs_dir: Path | None = None) -> None:
        self.by_kind: dict[str, dict[str, list[Certificate]]] = {k: {} for k in KIND_OF.values()}
        # kind -> (file, why) of the certificates left out
        self.unreadable: dict[str, list[tuple[str, str]]] = {k: [] for k in self.by_kind}
        shipped = resources.files("costguard.daemon").joinpath(SHIPPED_AWS_CERTS)
        legacy: list[Certificate] = []
        for kind in self.by_kind:
            for entry in sorted(shipped.joinpath(kind).iterdir(), key=lambda p: p.name):
                if entry.name.endswith(".pem"):
                    certs = _load_pems(f"{kind}/{entry.name}", entry.read_bytes(),
                                       "shipped certificates", self.unreadable[kind])
                    if certs:
                        self.by_kind[kind][entry.name.removesuffix(".pem")] = certs
        for entry in sorted(shipped.joinpath("legacy", "rsa").iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".pem"):
                legacy += _load_pems(f"legacy/rsa/{entry.name}", entry.read_bytes(),
                                     "shipped certificates", self.unreadable["rsa"])
        self._attach_by_key("rsa", legacy)
        if certs_dir is not None:
            self._add_own(Path(certs_dir))
        for kind, left in self.unreadable.items():
            if left:
                log.warning("%d AWS %s certificates left out: the installed cryptography "
                            "cannot read their keys (%s: %s); identity proofs that need them "
                            "are refused, the other kinds are checked as before",
                            len(left), kind, left[0][0], left[0][1])

    def _attach_by_key(self, kind: str, extra: Iterable[Certificate]) -> None:
        """Certificates AWS replaced, kept with each region whose current key is theirs (the
        2014 ec2.amazonaws.com certificate served 17 regions with one key)."""
        for old in extra:
            for certs in self.by_kind[kind].values():
                if any(c.key_der == old.key_der for c in certs):
                    certs.append(old)

    def _add_own(self, folder: Path) -> None:
        setting = "http.identity.aws_certs_dir"
        if not folder.is_dir():
            raise IdentitySettingError(
                f"{setting}: {folder} is not a folder: name a folder of <region>.pem "
                "certificates, or leave it unset for the ones costguard ships")
        # <region>.pem at the top is the `signature` kind, as before the other forms were read
        places = [("rsa", folder)] + [(k, folder / k) for k in self.by_kind]
        own: dict[str, dict[str, list[Certificate]]] = {k: {} for k in self.by_kind}
        for kind, place in places:
            for path in sorted(place.glob("*.pem")) if place.is_dir() else []:
                try:
                    pem = read_small(path, MAX_PEM_BYTES)
                except OSError as exc:
                    raise IdentitySettingError(
                        f"{setting}: {path} cannot be read: {exc.strerror}") from None
                own[kind].setdefault(path.stem, []).extend(
                    _load_pems(str(path), pem, setting, self.unreadable[kind]))
        if not any(own.values()):
            raise IdentitySettingError(
                f"{setting}: {folder} holds no <region>.pem (nor rsa/, rsa2048/ or dsa/ "
                "folders of them): put AWS's certificates there, or leave the setting unset "
                "for the ones costguard ships")
        for kind, regions in own.items():
            # a region given replaces the shipped ones
            self.by_kind[kind].update((r, certs) for r, certs in regions.items() if certs)

    def for_region(self, kind: str, region: str) -> list[Certificate]:
        """The region's certificates of `kind`, one per public key; ProofRefused naming the
        region, and how to add its certificate, when there is none."""
        found = self.named(kind, region)
        if not found:
            raise self.missing(kind, region)
        seen: set[bytes] = set()
        unique = []
        for c in found:
            if c.key_der not in seen:
                seen.add(c.key_der)
                unique.append(c)
        return unique

    def named(self, kind: str, region: str) -> list[Certificate]:
        """Every certificate of `kind` held for `region`, keys repeated; default.pem's (in
        aws_certs_dir only) are tried for every region after its own."""
        return self.by_kind[kind].get(region, []) + self.by_kind[kind].get("default", [])

    def missing(self, kind: str, region: str) -> ProofRefused:
        """The refusal for a region with no certificate of `kind`, saying how to add one,
        or that this kind cannot be read here."""
        left = [(name, why) for name, why in self.unreadable[kind]
                if Path(name).stem in (region, "default")]
        if left:
            form = next(f for f, k in KIND_OF.items() if k == kind)
            return ProofRefused(
                f"AWS's {kind} certificate for region {region} ({left[0][0]}) cannot be read "
                f"by the installed cryptography ({left[0][1]}): the {form} form cannot be "
                "checked here; have the agent send the rsa2048 form (its default), or "
                "install a cryptography that reads its key")
        return ProofRefused(
            f"no AWS {kind} certificate for region {region}: copy it from AWS's page 'AWS "
            "public certificates for instance identity document signatures' into a folder "
            f"as {kind}/{region}.pem and name the folder in http.identity.aws_certs_dir "
            "(it adds to the certificates costguard ships)")

    def regions(self, kind: str) -> list[str]:
        return sorted(self.by_kind[kind])
