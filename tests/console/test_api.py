"""The report API (/api/v1) against the CLI: the same figures for the same window, every
answer valid against the OpenAPI document it serves, pages that add up, a 4xx that says
what would work for every bad parameter, and no answer without a login (#21)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import jsonschema
import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.clock import ManualClock
from tests.console.conftest import ADMIN, PROXY, READER
from tests.console.harness import NOW, REPO, console_settings, serve

runner = CliRunner()


def cli_json(url: str, *args: str) -> Any:
    result = runner.invoke(app, ["--database", url, *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def get(base: str, path: str, headers: dict[str, str] = ADMIN, **params: Any
        ) -> httpx.Response:
    return httpx.get(base + path, params=params, headers=headers, timeout=30)


@pytest.fixture
def api(store: str, cli_clock: ManualClock) -> Any:
    with serve(console_settings(store, PROXY)) as base:
        yield base


def check(doc: Any, spec: dict[str, Any], schema: str) -> None:
    """`doc` against the named schema of the served OpenAPI document (JSON Schema 2020-12)."""
    jsonschema.validate(doc, {"$ref": f"#/components/schemas/{schema}",
                              "components": spec["components"]},
                        cls=jsonschema.Draft202012Validator)


def all_pages(base: str, path: str, key: str, **params: Any) -> list[Any]:
    rows: list[Any] = []
    url: str | None = base + path
    first = True
    while url:
        r = httpx.get(url, params=params if first else None, headers=ADMIN, timeout=30)
        assert r.status_code == 200, r.text
        doc = r.json()
        rows += doc[key]
        url, first = doc["page"]["next"], False
    return rows


def test_spend_is_the_report_s_json_for_the_same_window(api: str, store: str) -> None:
    since, until = (NOW - timedelta(hours=12)).isoformat(), NOW.isoformat()
    for by in (["team"], ["team", "instance-type"], ["instance"]):
        served = get(api, "/api/v1/spend", since=since, until=until,
                     by=",".join(d.replace("-", "_") for d in by), limit=1000).json()
        args = [a for d in by for a in ("--by", d)]
        cli = cli_json(store, "report", *args, "--since", since, "--until", until,
                       "--format", "json")
        cli.pop("waste_beyond_idle", None)  # the API serves the stored verdicts instead
        page = served.pop("page")
        assert served == cli, by
        assert page == {"offset": 0, "limit": 1000, "total": len(cli["rows"]), "next": None}
    assert cli["total"]["cost_usd"] > 0 and len(cli["rows"]) > 10


def test_spend_filters_as_the_report_does(api: str, store: str) -> None:
    served = get(api, "/api/v1/spend", window="7d", by="instance_type",
                 filter="team=research").json()
    cli = cli_json(store, "report", "--by", "instance-type", "--since", "7d",
                   "--filter", "team=research", "--format", "json")
    cli.pop("waste_beyond_idle", None)
    served.pop("page")
    assert served == cli and served["filters"] == {"team": "research"}
    assert served["total"]["cost_usd"] > 0


def test_pages_add_up_to_the_whole(api: str) -> None:
    whole = get(api, "/api/v1/spend", by="instance", limit=1000).json()
    paged = all_pages(api, "/api/v1/spend", "rows", by="instance", limit=7)
    assert paged == whole["rows"] and len(paged) > 7
    second = get(api, "/api/v1/spend", by="instance", limit=7, offset=7).json()
    assert second["rows"] == whole["rows"][7:14]
    assert second["page"]["total"] == len(whole["rows"])
    last = get(api, "/api/v1/spend", by="instance", limit=7, offset=len(paged) - 1).json()
    assert len(last["rows"]) == 1 and last["page"]["next"] is None


def test_every_answer_is_valid_against_the_served_openapi_document(api: str) -> None:
    spec = get(api, "/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    jsonschema.Draft202012Validator.check_schema({"components": spec["components"]})
    instance = get(api, "/api/v1/spend", by="instance", limit=1).json()["rows"][0]["instance"]
    answers = {
        "/api/v1/spend": ("Spend", {"by": "team,instance_type"}),
        f"/api/v1/instances/{instance}": ("Explanation", {}),
        "/api/v1/recommendations": ("Recommendations", {"all": "true"}),
        "/api/v1/anomalies": ("AnomalyList", {"window": "30d"}),
        "/api/v1/budgets": ("BudgetList", {}),
        "/api/v1/pending": ("PendingActionList", {}),
    }
    for path, (schema, params) in answers.items():
        r = get(api, path, **params)
        assert r.status_code == 200, (path, r.text)
        check(r.json(), spec, schema)
        documented = path if "/instances/" not in path else "/api/v1/instances/{id}"
        assert documented in spec["paths"], path
        names = {p["name"] for p in spec["paths"][documented]["get"]["parameters"]}
        assert set(params) <= names, path
    # a field the document does not know fails the check: the contract is closed
    doc = get(api, "/api/v1/spend", by="team").json()
    doc["total"]["surprise"] = 1.0
    with pytest.raises(jsonschema.ValidationError):
        check(doc, spec, "Spend")


def test_recommendations_budgets_and_anomalies_are_the_cli_s(api: str, store: str) -> None:
    served = get(api, "/api/v1/recommendations", all="true", limit=1000).json()
    served.pop("page")
    cli = cli_json(store, "recommend", "--all", "--format", "json")
    assert served == cli and served["summary"]["gpu_instances"] > 0
    budgets = get(api, "/api/v1/budgets").json()["items"]
    assert budgets == cli_json(store, "budget", "status", "--policies",
                               str(REPO / "policies"), "--format", "json")
    assert budgets, "the example policies define budgets"
    anomalies = get(api, "/api/v1/anomalies", window="30d").json()["items"]
    assert anomalies == cli_json(store, "anomaly", "list", "--since", "30d", "--format",
                                 "json")


def test_an_instance_is_explain_s_answer(api: str, store: str) -> None:
    rows = get(api, "/api/v1/spend", by="instance", limit=1000).json()["rows"]
    for ref in (rows[0]["instance"], rows[-1]["instance"]):
        served = get(api, f"/api/v1/instances/{ref}").json()
        cli = cli_json(store, "explain", ref, "--format", "json")  # the demo's policies
        assert served == cli
        assert served["instance"]["id"] == ref
    missing = get(api, "/api/v1/instances/i-nobody")
    assert missing.status_code == 404 and "i-nobody" in missing.json()["error"]


@pytest.mark.parametrize(("path", "params", "says"), [
    ("/api/v1/spend", {"by": "colour"}, "unknown by dimension 'colour'"),
    ("/api/v1/spend", {"by": "team,,region"}, "empty name"),
    ("/api/v1/spend", {"window": "fortnight"}, "window"),
    ("/api/v1/spend", {"since": "2026-03-09", "until": "2026-03-01"}, "must be before"),
    ("/api/v1/spend", {"window": "999d"}, "at most 400 days"),
    # were 500s: a date out of range, before or after the arithmetic
    ("/api/v1/spend", {"window": "3650000d"}, "longer than 100 years"),
    ("/api/v1/spend", {"until": "3650000d"}, "longer than 100 years"),
    ("/api/v1/spend", {"since": "0001-01-01T00:00+05:00"}, "years 1970 to 8999"),
    ("/api/v1/spend", {"since": "2026-03-01", "until": "9999-12-31"}, "years 1970 to 8999"),
    ("/api/v1/anomalies", {"since": "0001-01-01"}, "years 1970 to 8999"),
    ("/api/v1/spend", {"since": "8999-12-31T23:00-05:00"}, "outside the dates"),
    ("/api/v1/spend", {"limit": "0"}, "limit must be between 1 and 1000"),
    ("/api/v1/spend", {"limit": "ten"}, "whole number"),
    ("/api/v1/spend", {"offset": "-1"}, "offset must be a whole number from 0 to"),
    ("/api/v1/spend", {"offset": "1" + "0" * 10}, "offset must be between"),
    # the forms the OpenAPI document states and no others (costguard/console/params.py)
    ("/api/v1/spend", {"limit": ""}, "whole number"),
    ("/api/v1/spend", {"offset": "9" * 5000}, "offset must be between 0 and"),
    ("/api/v1/spend", {"limit": "\uff15"}, "whole number"),  # a digit, but not ASCII's
    ("/api/v1/spend", {"since": "20260301"}, "RFC 3339"),
    ("/api/v1/spend", {"filter": "team="}, "DIMENSION=VALUE"),
    ("/api/v1/recommendations", {"all": "yes"}, "all must be true or false"),
    ("/api/v1/spend", {"filter": "colour=red"}, "colour"),
    ("/api/v1/anomalies", {"window": "yesterday-ish"}, "window"),
    ("/api/v1/pending", {"limit": "100000"}, "limit must be between"),
])
def test_a_bad_parameter_gets_a_400_saying_what_would_work(
        api: str, path: str, params: dict[str, str], says: str) -> None:
    r = get(api, path, **params)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]


def test_a_dimension_named_twice_groups_once(api: str) -> None:
    twice = get(api, "/api/v1/spend", by="team,instance_type,team,instance-type").json()
    assert twice["by"] == ["team", "instance-type"]
    assert twice == get(api, "/api/v1/spend", by="team,instance-type").json()


def test_no_answer_without_a_login(api: str) -> None:
    for path in ("/api/v1/spend", "/api/v1/pending", "/api/v1/instances/i-sim07000011"):
        for headers in ({}, {"X-Forwarded-Groups": "finops"}, {"X-Forwarded-User": ""}):
            r = get(api, path, headers=headers)
            assert r.status_code == 401 and "not logged in" in r.json()["error"], path
    # a reader (not an admin) reads the API: it only reads
    assert get(api, "/api/v1/spend", headers=READER).status_code == 200
    assert get(api, "/api/v1/nothing-here").status_code == 404


def test_the_documented_years_are_the_ones_the_report_reads() -> None:
    """WHEN_PATTERN spells report/run.py's EARLIEST and LATEST out as digits: held together."""
    import re

    from costguard.console.params import WHEN_PATTERN
    from costguard.report.run import EARLIEST, LATEST

    first, past = EARLIEST.year, LATEST.year
    assert re.fullmatch(WHEN_PATTERN, f"{first}-01-01")
    assert re.fullmatch(WHEN_PATTERN, f"{past - 1}-12-31")
    assert not re.fullmatch(WHEN_PATTERN, f"{first - 1}-12-31")
    assert not re.fullmatch(WHEN_PATTERN, f"{past}-01-01")
