"""The shipped notebook scripts (deploy/notebooks/) run for real under bash, with `aws`,
`gcloud` and an installed agent that only record what they were asked: the agent is started
in the background for the notebook (a SageMaker notebook by the ARN SageMaker's metadata
file gives; a Workbench VM by its own identity), its token read into a file only root
reads and never put on a command line, its Jupyter server's kernels read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARN = "arn:aws:sagemaker:eu-west-1:123456789012:notebook-instance/research-nb"
SECRET = "s3cr3t-agent-token"


def _tool(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def _run(script: str, tmp: Path, env: dict[str, str]) -> tuple[list[str], str, Path]:
    """Run `script`; the started agent's arguments, the calls the cloud CLI got, the state
    folder."""
    bin_dir, prefix, state = tmp / "bin", tmp / "agent", tmp / "state"
    bin_dir.mkdir()
    (prefix / "bin").mkdir(parents=True)
    calls = tmp / "calls.txt"
    # an agent already installed: the script runs it, and the fake writes down how
    _tool(prefix / "bin" / "costguard-agent",
          f'printf "%s\\n" "$@" > {tmp}/agent-args.txt\n')
    cli = f'echo "$0 $*" >> {calls}\nif [[ "$*" == *secret* ]]; then echo {SECRET}; fi\n'
    _tool(bin_dir / "aws", cli)
    _tool(bin_dir / "gcloud", cli)
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "notebooks" / script)], capture_output=True, text=True,
        timeout=60, check=False,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
             "COSTGUARD_PREFIX": str(prefix), "COSTGUARD_STATE": str(state),
             "COSTGUARD_LOG": str(tmp / "agent.log"), **env})
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    args_file = tmp / "agent-args.txt"
    deadline = time.monotonic() + 30
    while not args_file.exists():  # started in the background
        assert time.monotonic() < deadline, (tmp / "agent.log").read_text()
        time.sleep(0.05)
    time.sleep(0.1)  # written whole
    return args_file.read_text().split("\n")[:-1], calls.read_text(), state


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_sagemaker_script_starts_the_agent_for_the_notebooks_arn(tmp_path: Path) -> None:
    metadata = tmp_path / "resource-metadata.json"
    metadata.write_text(json.dumps({"ResourceArn": ARN, "ResourceName": "research-nb"}))
    args, calls, state = _run("sagemaker-on-start.sh", tmp_path, {
        "COSTGUARD_METADATA": str(metadata), "COSTGUARD_URL": "https://cg.example:8787"})
    assert (_flag(args, "--provider"), _flag(args, "--instance-id")) == ("aws", ARN)
    assert _flag(args, "--url") == "https://cg.example:8787"
    assert _flag(args, "--jupyter-url") == "https://127.0.0.1:8443"
    token = Path(_flag(args, "--token-file"))
    assert token.read_text().strip() == SECRET and SECRET not in args
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and token.parent == state
    # the secret asked of the notebook's own region
    assert "secretsmanager get-secret-value --region eu-west-1" in calls


def test_the_workbench_script_lets_the_agent_prove_its_vm(tmp_path: Path) -> None:
    args, calls, _ = _run("workbench-post-startup.sh", tmp_path, {})
    assert "--provider" not in args and "--instance-id" not in args  # the VM's own identity
    assert _flag(args, "--jupyter-url") == "http://127.0.0.1:8080"
    token = Path(_flag(args, "--token-file"))
    assert token.read_text().strip() == SECRET and SECRET not in args
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "secrets versions access latest --secret=costguard-agent-token" in calls
