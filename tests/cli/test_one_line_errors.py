"""Every error one line, never a traceback: `init` where it cannot write, `report -o` to a
folder that is not there or not a folder, `demo` where its own database cannot be written
(named, not the configured database_url), and a port in use (costguard's line alone, not
uvicorn's bind error before it)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from costguard.daemon.http import HttpServer, PortUnavailable


def _costguard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "costguard.entry", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def _one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_init_where_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    _one_line(_costguard("init", "a-file/cg", cwd=tmp_path), "a-file/cg", "Not a directory")


@pytest.mark.parametrize("target", ["missing-dir/r.html", "a-file/r.html"])
def test_report_to_a_place_it_cannot_write(tmp_path: Path, target: str) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "policies").mkdir()
    from costguard.store.db import Database

    Database(f"sqlite:///{tmp_path / 'cg.db'}").dispose()
    done = _costguard("--database", "cg.db", "report", "--by", "team", "--format", "html",
                      "-o", target, cwd=tmp_path)
    _one_line(done, target)


def test_demo_where_its_database_cannot_be_written_names_that_database(
        tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "costguard-demo.db").symlink_to(tmp_path / "a-file" / "x")
    done = _costguard("demo", "--hours", "1", cwd=tmp_path)
    _one_line(done, "the demo's database ./costguard-demo.db", "--database PATH demo")
    assert "database_url" not in done.stderr


def test_a_port_in_use_is_one_costguard_line(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HttpServer(lambda *a: None, "127.0.0.1", port)  # type: ignore[arg-type]
        with pytest.raises(PortUnavailable, match=f"could not listen on 127.0.0.1:{port}"):
            server.start()
    assert not server.thread.is_alive() and not server.thread.ident  # uvicorn never ran
    assert not [r for r in caplog.records if r.name.startswith("uvicorn")]
