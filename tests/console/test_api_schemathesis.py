"""The report API under Schemathesis, the tool an API's users reach for to hold a server to
its OpenAPI document: requests generated from the document (valid ones, and ones it calls
invalid), run against the served API over a demo store, with every check it has by default:
no 5xx, every answer valid against the document, every status documented, what the
document calls valid taken and what it calls invalid refused.

What the document cannot say is left to test_api.py: `since` before `until`, a window of at
most 400 days, a date the calendar has (2026-02-30). Those three operations may answer a
valid-looking window with a 400, which says why; every other check holds for them too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import ADMIN, PROXY
from tests.console.harness import console_settings, serve

WINDOWED = ("GET /api/v1/spend", "GET /api/v1/anomalies", "GET /api/v1/instances/{id}")
EXPECTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]  # Schemathesis's own


def _config(path: Path) -> Path:
    blocks = [f'[[operations]]\ninclude-name = "{name}"\n'
              f"checks.positive_data_acceptance.expected-statuses = {[*EXPECTED, '400']}\n"
              for name in WINDOWED]
    path.write_text("\n".join(blocks).replace("'", '"'))
    return path


@pytest.mark.timeout(300)
def test_the_api_keeps_to_its_document_under_schemathesis(
        store: str, tmp_path: Path, cli_clock: Any) -> None:
    st = Path(sys.executable).with_name("st")
    with serve(console_settings(store, PROXY)) as base:
        run = subprocess.run(
            [str(st), "--no-color", "--config-file", str(_config(tmp_path / "st.toml")),
             "run", f"{base}/api/v1/openapi.json", "--seed", "20261206",
             "--max-examples", "60", "--workers", "1",
             "--report", "har", "--report-har-path", str(tmp_path / "calls.har"),
             *(arg for k, v in ADMIN.items() for arg in ("-H", f"{k}: {v}"))],
            cwd=tmp_path, capture_output=True, text=True, timeout=280)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-6000:]
    # it reached the API logged in, and each operation answered with its figures many times
    answered = Counter(
        (e["request"]["url"].split("?")[0].split("/api/v1/")[-1].split("/")[0],
         e["response"]["status"])
        for e in json.loads((tmp_path / "calls.har").read_text())["log"]["entries"])
    for operation in ("spend", "anomalies", "recommendations", "budgets", "pending"):
        assert answered[operation, 200] >= 20, answered
    assert sum(n for (_, status), n in answered.items() if status == 400) >= 100, answered
    assert not any(status >= 500 for _, status in answered), answered
