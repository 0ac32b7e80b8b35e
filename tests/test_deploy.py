"""deploy/ as a person uses it (#20 item 9): one port everywhere, a kustomization that
applies without optional CRDs, a systemd unit whose service user can read what its own
instructions install, and a compose file that starts costguard with PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PORT = 8787  # the daemon's default http.port


def _texts() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in DEPLOY.rglob("*")
            if p.is_file() and (p.suffix in ("", ".yaml", ".yml", ".service", ".md", ".json")
                                or p.name.endswith("Dockerfile"))}


def test_every_address_of_the_daemon_uses_its_port() -> None:
    found = []
    for path, text in _texts().items():
        for host, port in re.findall(r"https?://(costguard[\w.-]*):(\d+)", text):
            found.append((path.name, host, int(port)))
    assert found, "no daemon address found in deploy/"
    assert {port for _, _, port in found} == {PORT}, found


def test_the_kustomization_applies_without_the_prometheus_operator() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    assert "servicemonitor.yaml" not in resources  # its CRD may not exist
    for name in resources:
        assert (DEPLOY / "kubernetes" / name).is_file(), name
    kinds = {doc["kind"] for n in resources
             for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / n).read_text()) if doc}
    assert "ServiceMonitor" not in kinds


def test_the_systemd_unit_can_read_what_its_instructions_install() -> None:
    unit = (DEPLOY / "systemd" / "costguard.service").read_text()
    assert "DynamicUser=yes" in unit
    # the dynamic user reads the config and policies: they are world-readable, not 0750 root
    assert "install -d -m 0750 /etc/costguard" not in unit
    assert "chmod -R a+rX /etc/costguard" in unit
    # the secrets file is read by systemd itself (as root) before the service starts
    assert "EnvironmentFile=/etc/costguard/costguard.env" in unit
    # the working directory is the state directory: the policies are named absolutely
    paths = re.search(r"^Environment=COSTGUARD_POLICY_PATHS=(.+)$", unit, re.M)
    assert paths is not None and yaml.safe_load(paths.group(1)) == ["/etc/costguard/policies"]
    assert "costguard init /etc/costguard" in unit


def test_compose_starts_costguard_on_its_postgresql() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    pg, cg = services["postgres"], services["costguard"]
    url = urlsplit(cg["environment"]["COSTGUARD_DATABASE_URL"])
    assert url.scheme == "postgresql" and url.hostname == "postgres"
    env = pg["environment"]
    assert (url.username, url.password, url.path.lstrip("/")) == (
        env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"])
    assert cg["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in pg
    assert (DEPLOY.parent / cg["build"]["context"].replace("..", ".") /
            cg["build"]["dockerfile"]).is_file()
    assert cg["ports"] == [f"127.0.0.1:{PORT}:{PORT}"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE {PORT}" in dockerfile
    assert "costguard init /etc/costguard" in dockerfile  # the image runs with no mount
