"""Which instance the agent runs on, read from EC2 IMDSv2 / GCE metadata on loopback."""

from __future__ import annotations

import httpx
import pytest

from costguard.errors import ConfigError
from costguard.telemetry.identity import Identity, resolve_identity
from tests.fakes.loopback import free_port, serve
from tests.telemetry.servers import metadata_app


def test_ec2_identity_uses_an_imdsv2_session_token():
    app, seen = metadata_app(
        ec2={"instance-id": "i-0123456789abcdef0", "placement/availability-zone": "us-east-1b"}
    )
    with serve(app) as url, httpx.Client(timeout=2) as client:
        found = resolve_identity(client, ec2_url=url, gce_url=url)
    assert found == Identity(provider="aws", instance_id="i-0123456789abcdef0", zone="us-east-1b")
    assert found.region == "us-east-1"
    assert seen[0] == "PUT /latest/api/token"  # the token first: IMDSv1 is refused


def test_gce_identity_needs_the_metadata_flavor_header():
    app, seen = metadata_app(
        gce={
            "instance/id": "4520389217331571234",
            "instance/zone": "projects/123456/zones/us-central1-a",
            "project/project-id": "ml-research",
            "instance/name": "trainer-7",
        }
    )
    with serve(app) as url, httpx.Client(timeout=2) as client:
        found = resolve_identity(client, ec2_url=url, gce_url=url)
    assert found.provider == "gcp"
    assert found.instance_id == "4520389217331571234"
    assert (found.zone, found.region) == ("us-central1-a", "us-central1")
    assert (found.project, found.name) == ("ml-research", "trainer-7")
    assert "GET /computeMetadata/v1/instance/id" in seen


def test_a_configured_identity_skips_the_metadata_servers():
    with httpx.Client(timeout=2) as client:
        found = resolve_identity(client, provider="sim", instance_id="sim-gpu-3")
    assert found == Identity(provider="sim", instance_id="sim-gpu-3")
    with httpx.Client(timeout=2) as client, pytest.raises(ConfigError, match="--provider"):
        resolve_identity(client, instance_id="i-1")


def test_off_the_cloud_the_error_says_how_to_configure_the_identity():
    nowhere = f"http://127.0.0.1:{free_port()}"
    with httpx.Client(timeout=1) as client, pytest.raises(ConfigError) as info:
        resolve_identity(client, ec2_url=nowhere, gce_url=nowhere)
    assert "--instance-id" in str(info.value)
