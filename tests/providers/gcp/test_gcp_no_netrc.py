"""A netrc file's password never goes to Google: requests (under the Compute REST client and
google-auth) put a netrc entry's credentials, or its `default` entry's, in place of the
Authorization header google-auth set, on every call. The `costguard` executable reads no
netrc (costguard.entry.no_netrc)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SECRET = "netrc-s3cret"


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization)


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        body = b"{}"  # an empty list, whatever was asked
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _home_with_netrc(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    netrc = home / ".netrc"
    netrc.write_text(f"default login someone password {SECRET}\n")
    netrc.chmod(0o600)
    return home


def test_a_cycle_sends_no_netrc_password_to_compute_engine(tmp_path: Path,
                                                          recorder: _Recorder) -> None:
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    config = tmp_path / "costguard.yaml"
    config.write_text(json.dumps({
        "database_url": f"sqlite:///{tmp_path / 'cg.db'}",
        "policy_paths": [],
        "providers": {"gcp": {
            "projects": ["ml-prod"], "anonymous": True, "compute_endpoint": url,
            "tpu_endpoint": url, "workbench_endpoint": url,
            "resource_manager_endpoint": url, "monitoring_endpoint": "http://127.0.0.1:9"}},
    }))
    home = _home_with_netrc(tmp_path)
    run = "import sys; sys.argv[0] = 'costguard'; from costguard.entry import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", run, "run", "--once", "--config", str(config)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert "Traceback" not in done.stderr, done.stderr
    assert recorder.seen, done.stderr  # the cycle listed the project's VMs here
    assert all(auth is None for _, auth in recorder.seen), recorder.seen  # anonymous
    assert SECRET not in done.stdout + done.stderr


def test_requests_would_send_it_without_the_guard(tmp_path: Path, recorder: _Recorder
                                                   ) -> None:
    """What the guard prevents, shown with the same file: the test above is not vacuous."""
    url = f"http://127.0.0.1:{recorder.server_address[1]}/compute/v1/projects/p/zones"
    home = _home_with_netrc(tmp_path)
    probe = ("import sys, requests; from costguard.entry import no_netrc\n"
             "if sys.argv[1] == 'guarded': no_netrc()\n"
             f"requests.get({url!r})")
    for how in ("plain", "guarded"):
        subprocess.run([sys.executable, "-c", probe, how], check=True, timeout=60,
                       env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    (_, plain), (_, guarded) = recorder.seen
    assert plain is not None and plain.startswith("Basic ")
    assert guarded is None
