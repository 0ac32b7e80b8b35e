"""A file costguard is configured with is a regular file of a bounded size: `costguard
validate /dev/zero` read until memory ran out (a MemoryError traceback: the size check saw
0 bytes) and a named pipe left the command waiting for a writer. Each is now the usual
one-line "cannot read" naming why, for policies, costguard.yaml and the token files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from costguard.small_files import TooLarge, read_small


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


def test_a_regular_file_and_a_symlink_to_one_are_read(tmp_path: Path) -> None:
    (tmp_path / "..data").mkdir()  # a mounted Kubernetes Secret: a symlink to a file
    (tmp_path / "..data" / "token").write_bytes(b"s3cret\n")
    (tmp_path / "token").symlink_to(tmp_path / "..data" / "token")
    assert read_small(tmp_path / "token", 64) == b"s3cret\n"


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "fifo", "folder"])
def test_anything_but_a_regular_file_is_refused_at_once(path: str, fifo: Path,
                                                        tmp_path: Path) -> None:
    target = {"fifo": fifo, "folder": tmp_path}.get(path, Path(path))
    with pytest.raises(OSError) as caught:
        read_small(target, 2**20)
    assert caught.value.strerror in ("not a regular file (a device, a pipe or a socket)",
                                     "Is a directory")


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 1001)
    with pytest.raises(TooLarge) as caught:
        read_small(tmp_path / "big", 1000)
    assert (caught.value.size, caught.value.limit) == (1001, 1000)
    assert caught.value.strerror == "1,001 bytes, over the 1,000-byte limit"


def _costguard(*args: str, cwd: Path, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "costguard.entry", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("what", ["/dev/zero", "fifo"])
def test_validate_names_a_device_or_a_pipe_in_one_line(what: str, fifo: Path,
                                                       tmp_path: Path) -> None:
    target = str(fifo) if what == "fifo" else what
    done = _costguard("validate", target, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
    assert (f"{target}:1:1: cannot read file: not a regular file (a device, a pipe or a "
            "socket)") in done.stdout + done.stderr
    config = _costguard("status", cwd=tmp_path, env={"COSTGUARD_CONFIG": target})
    assert config.returncode == 2, config.stderr
    assert config.stderr.strip() == (f"error: {target}: cannot read the config file: not a "
                                     "regular file (a device, a pipe or a socket)")


def test_the_agent_s_token_file_is_bounded_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from costguard.entry import agent_main; agent_main()",
         "--url", "http://127.0.0.1:9", "--token-file", "/dev/zero", "--provider", "aws",
         "--instance-id", "i-1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "/dev/zero" in done.stderr and "not a regular file" in done.stderr
