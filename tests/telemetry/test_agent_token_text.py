"""The agent token travels in an HTTP header, which carries printable ASCII. A token with
any other character was taken by both ends and then failed: the agent's HTTP client raised
past the push loop, and the daemon built its expected header with `.encode()` (a traceback
at start for a byte that is not UTF-8 in the environment) or could never match it. Both
ends now refuse it when they start, with one message that never shows the token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from costguard.bearer import token_problem
from costguard.config import ingest_token, load_settings
from costguard.errors import ConfigError
from costguard.telemetry.agent import AgentSettings
from costguard.telemetry.commands import run_agent


@pytest.mark.parametrize(("token", "problem"), [
    ("t\u00f6ken", "character 2 of 5 is not ASCII"),
    ("two words", "character 4 of 9 is a space"),
    ("tab\there", "character 4 of 8 is a control character"),
    ("del\x7f", "character 4 of 4 is a control character"),
    ("odd\udcff", "character 4 of 4 is not ASCII"),  # a byte that is not UTF-8, from env
])
def test_a_token_no_header_carries_is_named_by_place_not_shown(token: str,
                                                                problem: str) -> None:
    said = token_problem(token)
    assert said is not None and said.startswith(problem) and "openssl rand -hex 32" in said
    assert token not in said


@pytest.mark.parametrize("token", ["0123abcdef", "Zm9v+YmFy/YmF6==", "a!#$%&'*-.^_`|~z"])
def test_printable_ascii_tokens_pass(token: str) -> None:
    assert token_problem(token) is None


def test_the_agent_refuses_it_before_it_samples(tmp_path: Path) -> None:
    settings = AgentSettings(url="http://127.0.0.1:9", token="t\u00f6ken",
                             buffer_path=tmp_path / "b", provider="aws", instance_id="i-1")
    with pytest.raises(ConfigError, match=r"^the agent token: character 2 of 5 is not ASCII"):
        run_agent(settings)


@pytest.mark.parametrize(("token_file", "said"), [
    ("tok", "--token-file tok: not UTF-8 text (byte 3); the agent token is printable ASCII"),
    # bounded like every configured file (small_files): /dev/zero was read for ever
    ("/dev/zero", "--token-file /dev/zero: not a file or a pipe (a device or a socket)"),
])
def test_a_token_file_it_cannot_take_is_one_line(tmp_path: Path, token_file: str,
                                                 said: str) -> None:
    (tmp_path / "tok").write_bytes(b"tok\xff\n")
    done = subprocess.run(
        [sys.executable, "-c", "from costguard.entry import agent_main; agent_main()",
         "--url", "http://127.0.0.1:9", "--token-file", token_file, "--provider", "aws",
         "--instance-id", "i-1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"error: {said}"


def test_the_daemon_refuses_it_in_the_config_file_at_its_place(tmp_path: Path) -> None:
    config = tmp_path / "costguard.yaml"
    config.write_text('http:\n  ingest_token: "t\\u00f6ken"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value).endswith(
        f"{config}:2:17: http.ingest_token: character 2 of 5 is not ASCII, which an HTTP "
        "header cannot carry; use printable ASCII, e.g. the output of `openssl rand -hex 32`")
    assert "t\u00f6ken" not in str(caught.value)


def test_the_daemon_refuses_it_from_the_environment(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_AGENT_TOKEN", "ok-token")
    assert ingest_token(load_settings()) == "ok-token"
    monkeypatch.setenv("COSTGUARD_AGENT_TOKEN", "a\udcffb")
    with pytest.raises(ConfigError, match=r"^COSTGUARD_AGENT_TOKEN: character 2 of 3 is not"):
        ingest_token(load_settings())
