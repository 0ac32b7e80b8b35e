"""Which instance the agent runs on: a configured override, EC2 IMDSv2, or GCE metadata.

The metadata base URLs are settings so tests point them at a loopback server. Each probe
has a short timeout: off the cloud, the link-local address simply does not answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from costguard.errors import ConfigError
from costguard.model import ProviderName

EC2_METADATA_URL = "http://169.254.169.254"
GCE_METADATA_URL = "http://metadata.google.internal"
IMDS_TOKEN_TTL_S = 21600


@dataclass(frozen=True, slots=True)
class Identity:
    provider: ProviderName
    instance_id: str
    zone: str | None = None
    project: str | None = None  # GCP project id (for stopping through the API)
    name: str | None = None  # GCE instance name

    @property
    def region(self) -> str | None:
        if self.zone is None:
            return None
        if self.provider == "aws":
            return self.zone.rstrip("abcdefghijklmnopqrstuvwxyz")  # us-east-1a -> us-east-1
        return self.zone.rsplit("-", 1)[0]  # us-central1-a -> us-central1


def ec2_identity(client: httpx.Client, base: str = EC2_METADATA_URL) -> Identity | None:
    """IMDSv2: PUT a session token, then read instance-id and placement with it."""
    try:
        token = client.put(
            f"{base}/latest/api/token",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(IMDS_TOKEN_TTL_S)},
        )
        if token.status_code != 200:
            return None
        headers = {"X-aws-ec2-metadata-token": token.text}
        iid = client.get(f"{base}/latest/meta-data/instance-id", headers=headers)
        if iid.status_code != 200 or not iid.text.strip():
            return None
        az = client.get(f"{base}/latest/meta-data/placement/availability-zone", headers=headers)
    except httpx.HTTPError:
        return None
    zone = az.text.strip() if az.status_code == 200 and az.text.strip() else None
    return Identity(provider="aws", instance_id=iid.text.strip(), zone=zone)


def gce_identity(client: httpx.Client, base: str = GCE_METADATA_URL) -> Identity | None:
    """GCE metadata server (header `Metadata-Flavor: Google`): numeric id, zone, project."""
    headers = {"Metadata-Flavor": "Google"}
    root = f"{base}/computeMetadata/v1"
    try:
        iid = client.get(f"{root}/instance/id", headers=headers)
        if iid.status_code != 200 or iid.headers.get("metadata-flavor") != "Google":
            return None
        zone = client.get(f"{root}/instance/zone", headers=headers)
        project = client.get(f"{root}/project/project-id", headers=headers)
        name = client.get(f"{root}/instance/name", headers=headers)
    except httpx.HTTPError:
        return None
    return Identity(
        provider="gcp",
        instance_id=iid.text.strip(),
        # "projects/123/zones/us-central1-a" -> "us-central1-a"
        zone=zone.text.strip().rsplit("/", 1)[-1] if zone.status_code == 200 else None,
        project=project.text.strip() if project.status_code == 200 else None,
        name=name.text.strip() if name.status_code == 200 else None,
    )


def resolve_identity(
    client: httpx.Client,
    *,
    provider: ProviderName | None = None,
    instance_id: str | None = None,
    ec2_url: str = EC2_METADATA_URL,
    gce_url: str = GCE_METADATA_URL,
) -> Identity:
    """The override when both parts are given; else ask EC2, then GCE."""
    if instance_id:
        if provider is None:
            raise ConfigError(
                "--instance-id needs --provider (aws, gcp or sim) to say whose id it is"
            )
        return Identity(provider=provider, instance_id=instance_id)
    probes = {
        "aws": lambda: ec2_identity(client, ec2_url),
        "gcp": lambda: gce_identity(client, gce_url),
    }
    order = [provider] if provider in probes else list(probes)
    for name in order:
        if name is not None and (found := probes[name]()) is not None:
            return found
    raise ConfigError(
        "cannot tell which instance this agent runs on: no EC2 (IMDSv2) or GCE metadata "
        "server answered; pass --provider and --instance-id"
    )


def fetch_proof(client: httpx.Client, identity: Identity, *, ec2_url: str = EC2_METADATA_URL,
                gce_url: str = GCE_METADATA_URL, audience: str = "costguard"
                ) -> dict[str, str] | None:
    """The cloud's signed statement of which instance this is, for `POST /v1/identity`:
    EC2's identity document with its rsa2048 and signature bodies, or GCE's identity token
    (a Google-signed JWT for `audience`, with the instance id). None off the cloud or when
    it cannot be had."""
    try:
        if identity.provider == "aws":
            token = client.put(f"{ec2_url}/latest/api/token", headers={
                "X-aws-ec2-metadata-token-ttl-seconds": str(IMDS_TOKEN_TTL_S)})
            if token.status_code != 200:
                return None
            headers = {"X-aws-ec2-metadata-token": token.text}
            base = f"{ec2_url}/latest/dynamic/instance-identity"
            document = client.get(f"{base}/document", headers=headers)
            if document.status_code != 200:
                return None
            proof = {"provider": "aws", "document": document.text}
            # rsa2048 (RSA-2048/SHA-256) is what the daemon prefers; signature
            # (RSA-1024/SHA-256) is what daemons before it read. pkcs7 (DSA/SHA-1) is not sent.
            for form in ("rsa2048", "signature"):
                body = client.get(f"{base}/{form}", headers=headers)
                if body.status_code == 200 and body.text.strip():
                    proof[form] = body.text
            return proof if len(proof) > 2 else None
        if identity.provider == "gcp":
            answer = client.get(
                f"{gce_url}/computeMetadata/v1/instance/service-accounts/default/identity",
                params={"audience": audience, "format": "full"},
                headers={"Metadata-Flavor": "Google"})
            if answer.status_code != 200:
                return None
            return {"provider": "gcp", "token": answer.text.strip()}
    except httpx.HTTPError:
        return None
    return None


def exchange_proof(client: httpx.Client, url: str, token: str, proof: dict[str, str]
                   ) -> str | None:
    """Trade the proof for a credential for this instance (None: the daemon does not offer
    it, or refused; the reason is logged and the shared token stays in use)."""
    import logging

    from costguard.telemetry.answers import ask

    try:
        answer = ask(client, "POST", url.rstrip("/") + "/v1/identity", json=proof,
                     headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        logging.getLogger(__name__).warning("identity not proven: daemon unreachable (%s)",
                                            type(exc).__name__)
        return None
    credential = None if answer.payload is None else answer.payload.get("credential")
    if answer.status != 200 or not isinstance(credential, str):
        logging.getLogger(__name__).warning("identity not proven (%s): %s", answer.status,
                                            answer.text)
        return None
    return credential
