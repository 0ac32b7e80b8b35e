"""A file costguard is configured with is a regular file or a pipe, of a bounded size:
`costguard validate /dev/zero` read until memory ran out (a MemoryError traceback: the size
check saw 0 bytes) and a named pipe left the command waiting for a writer. A device is now
the usual one-line "cannot read" naming why, for policies and costguard.yaml (the agent's
token file: tests/telemetry/test_agent_token_text.py); a pipe (`<(helm template ...)`) is
read, bounded, and one nothing writes is empty at once."""

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


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "folder"])
def test_a_device_or_a_folder_is_refused_at_once(path: str, tmp_path: Path) -> None:
    target = tmp_path if path == "folder" else Path(path)
    with pytest.raises(OSError) as caught:
        read_small(target, 2**20)
    assert caught.value.strerror in ("not a file or a pipe (a device or a socket)",
                                     "Is a directory")


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 1001)
    with pytest.raises(TooLarge) as caught:
        read_small(tmp_path / "big", 1000)
    assert caught.value.strerror == "1,001 bytes, over the 1,000-byte limit"


def test_a_pipe_is_read_bounded_and_one_nothing_writes_is_empty_at_once(
        fifo: Path, tmp_path: Path) -> None:
    assert read_small(fifo, 100) == b""  # no writer: empty, not a wait for one
    read, write = os.pipe()
    os.write(write, b"x" * 101)
    os.close(write)
    with pytest.raises(TooLarge) as caught:
        read_small(Path(f"/proc/self/fd/{read}"), 100)
    os.close(read)
    assert caught.value.strerror == "over 100 bytes, over the 100-byte limit"
    read, write = os.pipe()
    os.write(write, b"policies: []\n")
    os.close(write)
    assert read_small(Path(f"/proc/self/fd/{read}"), 100) == b"policies: []\n"
    os.close(read)


def _costguard(*args: str, cwd: Path, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "costguard.entry", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


def test_validate_names_a_device_in_one_line_and_a_silent_pipe_is_empty(
        fifo: Path, tmp_path: Path) -> None:
    done = _costguard("validate", "/dev/zero", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
    assert ("/dev/zero:1:1: cannot read file: not a file or a pipe (a device or a socket)"
            in done.stdout + done.stderr)
    config = _costguard("status", cwd=tmp_path, env={"COSTGUARD_CONFIG": "/dev/zero"})
    assert config.returncode == 2, config.stderr
    assert config.stderr.strip() == ("error: /dev/zero: cannot read the config file: not a "
                                     "file or a pipe (a device or a socket)")
    silent = _costguard("validate", str(fifo), cwd=tmp_path)  # it waited for a writer
    assert silent.returncode == 2 and f"{fifo}:1:1: the file is empty" in silent.stderr

