"""Every error one line, never a traceback: `init` where it cannot write, `report -o` to a
folder that is not there or not a folder, `demo` where its own database cannot be written
(named, not the configured database_url), and a port in use (costguard's line alone, not
uvicorn's bind error before it), and an argument that is not UTF-8 (a traceback at the
store when `explain` looked it up)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from costguard.daemon.http import HttpServer, PortUnavailable


def _costguard(*args: str, cwd: Path, entry: str = "main"
               ) -> subprocess.CompletedProcess[str]:
    run = f"import sys; sys.argv[0] = 'costguard'; from costguard.entry import {entry}; {entry}()"
    return subprocess.run([sys.executable, "-c", run, *args], cwd=cwd,
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


def test_a_path_too_long_is_shown_by_its_ends(tmp_path: Path) -> None:
    """The kernel's "File name too long" for a pasted name of thousands of characters: the
    one line shows where it starts and ends and how long it is, not all of it."""
    (tmp_path / "policies").mkdir()
    from costguard.store.db import Database

    Database(f"sqlite:///{tmp_path / 'cg.db'}").dispose()
    target = "start-" + "x" * 5_000 + "-end/r.html"
    done = _costguard("--database", "cg.db", "report", "--format", "html", "-o", target,
                      cwd=tmp_path)
    _one_line(done, "start-xxx", "x-end/r.html", "(5,017 characters)", "too long")
    assert len(done.stderr) < 400


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


@pytest.mark.parametrize(("entry", "argv", "shown"), [
    ("main", ["--database", "cg.db", "explain", "i-\udcff"], "argument 4 (i-\\xff)"),
    ("main", ["--database", "cg.db", "audit", "--instance", "\u00e9t\udcc3"],
     "argument 5 (\u00e9t\\xc3)"),
    ("main", ["agent", "run", "--daemon", "http://h\udcc3x"], "(http://h\\xc3x)"),
    ("agent_main", ["run", "--daemon", "http://h\udcc3x"], "argument 3 (http://h\\xc3x)"),
])
def test_an_argument_that_is_not_utf8_is_one_line(tmp_path: Path, entry: str,
                                                 argv: list[str], shown: str) -> None:
    """Python reads an argument's odd bytes as lone surrogates (PEP 383), which the store
    refused with a traceback; each entry point refuses them first, naming the byte."""
    from costguard.store.db import Database

    Database(f"sqlite:///{tmp_path / 'cg.db'}").dispose()
    done = _costguard(*argv, cwd=tmp_path, entry=entry)
    _one_line(done, shown, "not UTF-8 text (byte 0x", "UTF-8 locale")


def test_utf8_arguments_pass() -> None:
    from costguard.entry import not_utf8

    assert not_utf8(["explain", "i-\u00e9\u4e2d\U0001f600", "--by", "team"]) is None
    assert not_utf8(["ok", "bad\udc80"]) == (
        "argument 2 (bad\\x80) is not UTF-8 text (byte 0x80): costguard reads its arguments "
        "as UTF-8; use a UTF-8 locale, or rename the file")
