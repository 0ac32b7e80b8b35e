"""`costguard --help` stays quick because it imports nothing heavy (#20 item 8: it took
1.9 s). What it imports is checked here; how long it takes is measured by `make bench`
(cli-startup), not by a timed test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
sys.argv = ["costguard", *sys.argv[1:]]
from costguard.entry import main  # the installed `costguard` executable
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
# the installed `costguard-agent` executable
AGENT_PROBE = PROBE.replace("from costguard.entry import main",
                            "from costguard.entry import agent_main as main")

# what a command imports when it runs, never to print its help
HEAVY = {"sqlalchemy", "sqlmodel", "alembic", "boto3", "botocore", "google", "apscheduler",
         "httpx", "jinja2", "starlette", "uvicorn", "prometheus_client", "yaml", "pyarrow",
         "costguard.config", "costguard.store", "costguard.policy", "costguard.providers",
         "costguard.report", "costguard.demo", "costguard.engine", "costguard.billing.importer"}


def _imported(*argv: str, probe: str = PROBE) -> set[str]:
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    modules: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return set(modules)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["report", "--help"],
                                  ["demo", "--help"], ["alerts", "list", "--help"],
                                  ["status", "--help"], ["agent", "--help"]])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    imported = _imported(*argv)
    heavy = {m for m in imported if m in HEAVY or m.split(".")[0] in HEAVY
             or any(m.startswith(h + ".") for h in HEAVY)}
    assert heavy == set(), f"costguard {' '.join(argv)} imported {sorted(heavy)}"


def test_a_command_that_runs_still_imports_what_it_needs() -> None:
    # the probe can tell: `validate` on nothing reads policies, so it loads the policy package
    assert "costguard.policy.load" in _imported("validate", "/nonexistent")


@pytest.mark.parametrize("argv", [["--help"], ["replay", "--help"], ["record", "--help"]])
def test_costguard_agent_is_the_light_agent_process(argv: list[str]) -> None:
    """`costguard agent` loads what `costguard-agent` loads, and not the rest of the CLI:
    one small process on a GPU host whichever name starts it (#22)."""
    via_costguard = _imported("agent", *argv) - {"costguard.entry"}
    alone = _imported(*argv, probe=AGENT_PROBE) - {"costguard.entry"}
    assert "costguard.cli" not in via_costguard
    assert via_costguard == alone


DAEMON_PROBE = """
import json, sys
from costguard.daemon.scheduler import Daemon
from costguard.engine import Engine
from costguard.config import Settings
import costguard.console.app, costguard.console.pages, costguard.console.api
Settings(providers={"aws": {"regions": ["us-east-1"]}, "gcp": {"projects": ["ml-prod"]}})
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_the_daemon_loads_a_cloud_sdk_only_when_it_builds_that_provider() -> None:
    """boto3 and the Google clients are tens of MB resident: a daemon on one cloud (or the
    simulated one) does not carry the other's, and reading settings that name both loads
    neither (#22: daemon RSS)."""
    loaded = _imported(probe=DAEMON_PROBE)
    sdks = {m for m in loaded if m.split(".")[0] in ("boto3", "botocore", "grpc")
            or m.startswith("google.cloud")}
    assert sdks == set()


SIM_DAEMON_PROBE = """
import json, sys
from costguard.clock import SystemClock
from costguard.config import Settings
from costguard.daemon.scheduler import Daemon
from costguard.providers.registry import build_providers
build_providers(Settings(), SystemClock())
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_the_simulated_cloud_does_not_load_the_aws_client_stack() -> None:
    """The simulated cloud borrows AWS's price tables and snapshot tag, not its clients: it
    loaded lxml and botocore.utils through the AWS actions (~8 MB resident, counted in
    daemon-rss's figures) for one tag name."""
    loaded = _imported(probe=SIM_DAEMON_PROBE)
    assert "costguard.demo.sim" in loaded
    heavy = {m for m in loaded if m.split(".")[0] in ("lxml", "boto3", "dateutil")
             or m in ("botocore.utils", "costguard.providers.aws.actions")}
    assert heavy == set()


SQLITE_DAEMON_PROBE = """
import json, sys, tempfile
from pathlib import Path
from costguard.daemon.leader import leadership_for
from costguard.daemon.scheduler import Daemon
from costguard.store.db import Database
url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'cg.db'}"
Database(url)
leadership_for(url).try_acquire()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_a_daemon_on_sqlite_does_not_load_the_postgresql_driver() -> None:
    """psycopg is ~9 MB resident: only the PostgreSQL leader election (pg_leader.py) and a
    PostgreSQL store load it (#22: daemon RSS)."""
    loaded = _imported(probe=SQLITE_DAEMON_PROBE)
    assert {m for m in loaded if m.split(".")[0].startswith("psycopg")} == set()
