"""The OpenAPI 3.1 document of the report API (`GET /api/v1/openapi.json`).

Its schemas are JSON Schema (2020-12): the contract tests validate every answer of the API
against them, so a field added to the CLI's JSON without a word here fails a test.
"""

from __future__ import annotations

from typing import Any

from costguard.console import params

NUM: dict[str, Any] = {"type": "number"}
INT: dict[str, Any] = {"type": "integer"}
STR: dict[str, Any] = {"type": "string"}
BOOL: dict[str, Any] = {"type": "boolean"}
WHEN: dict[str, Any] = {"type": "string", "format": "date-time"}


def _opt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None, *,
         extra: Any = False) -> dict[str, Any]:
    return {"type": "object", "properties": {**required, **(optional or {})},
            "required": list(required), "additionalProperties": extra}


SPEND_FIGURES = {"cost_usd": NUM, "idle_cost_usd": NUM, "idle_share": NUM, "spot_share": NUM,
                 "idle_percent": INT, "spot_percent": INT,
                 "spot_savings_possible_usd": NUM, "gpu_hours": NUM, "instances": INT}

SCHEMAS: dict[str, Any] = {
    # a 404 from the daemon's own router (a path the API's routes do not match: an id with
    # a line break or a slash) lists the daemon's routes too
    "Error": _obj({"error": STR}, {"routes": {"type": "array", "items": STR}}),
    "Page": _obj({"offset": INT, "limit": INT, "total": INT, "next": _opt(STR)}),
    # one row: the dimension values asked for (`by`) as strings, then the figures
    "SpendRow": _obj(SPEND_FIGURES, {"billed_usd": NUM, "gap_usd": NUM}, extra=STR),
    "Waste": _obj({"since": WHEN, "until": WHEN, "gpu_instances": INT, "underused": INT,
                   "underused_usd": NUM, "monthly_savings_usd": NUM,
                   "by_team": {"type": "object"},
                   "top": {"type": "array", "items": _obj({
                       "instance": STR, "team": STR, "bottleneck": STR, "gpus_used": NUM,
                       "fit": _opt(STR), "monthly_savings_usd": NUM})}}),
    "Spend": _obj({
        "schema": INT, "currency": STR, "by": {"type": "array", "items": STR},
        "since": WHEN, "until": WHEN, "filters": {"type": "object", "additionalProperties": STR},
        "compare": _opt(STR), "rows": {"type": "array", "items": _ref("SpendRow")},
        "total": _ref("SpendRow"), "price_warnings": {"type": "array", "items": STR},
        "page": _ref("Page")}, {
        "waste_beyond_idle": _ref("Waste"), "bill_total_usd": NUM,
        "billed_not_compared": {"type": "array"},
        # unused volumes, snapshots, addresses, reservations' free part (docs/storage.md),
        # notebooks idle over the last day (docs/notebooks.md), when there are any
        "paid_not_running": {"type": "array", "items": _obj({
            "team": STR, "kind": STR, "count": INT, "size_gb": INT, "usd_per_month": NUM,
            "unpriced": INT, "longest_unused_days": NUM, "idle_share": _opt(NUM),
            "unused_for": STR})},
        # capacity reservations seen in the window (docs/reservations.md), when any
        "reservations": {"type": "array", "items": _obj({
            "provider": STR, "reservation": STR, "name": _opt(STR), "team": STR, "zone": STR,
            "instance_type": STR, "capacity": INT, "used": INT, "accelerators": INT,
            "accelerator": _opt(STR), "unused_instance_hours": NUM,
            "unused_accelerator_hours": NUM, "unused_usd": _opt(NUM), "ends_at": _opt(WHEN),
            "match": STR, "capacity_block": BOOL,
            "twins": {"type": "array", "items": STR}})}}),
    "Explanation": _obj({
        "instance": _obj({"provider": STR, "id": STR, "name": _opt(STR), "account": STR,
                          "region": STR, "instance_type": STR, "state": STR,
                          "lifecycle": STR, "gpus": INT, "owner": _opt(STR),
                          "tags": {"type": "object", "additionalProperties": STR}}),
        "as_of": WHEN, "as_of_what": STR, "usd_per_hour": NUM, "price_source": STR,
        "protected": BOOL, "snoozed_until": _opt(WHEN), "paused": BOOL,
        "telemetry": {"type": "object"}, "efficiency": _opt({"type": "object"}),
        "policies": {"type": "array", "items": {"type": "object", "required": [
            "policy", "mode", "outcome", "condition_holds", "state"]}},
        "journal": {"type": "array", "items": _obj({
            "at": WHEN, "policy": STR, "action": STR, "status": STR, "dry_run": BOOL,
            "detail": STR, "usd_per_hour": NUM})}}),
    "Recommendations": _obj({
        "schema": INT, "since": WHEN, "until": WHEN, "settings": {"type": "object"},
        "summary": _obj({"gpu_instances": INT, "underused": INT, "underused_usd": NUM,
                         "monthly_savings_usd": NUM, "insufficient_data": INT,
                         "stored_verdicts": INT, "oldest_stored_verdict": _opt(WHEN)}),
        "by_team": {"type": "object"},
        "items": {"type": "array", "items": {"type": "object"}}, "page": _ref("Page")}),
    "Anomaly": _obj({
        "id": INT, "rule": STR, "dimension": STR, "value": STR, "granularity": STR,
        "bucket_start": WHEN, "last_bucket": WHEN, "buckets": INT, "ended_at": _opt(WHEN),
        "ongoing": BOOL, "actual_usd": NUM, "baseline_usd": NUM, "impact_usd": NUM,
        "status": STR, "explanation": STR}),
    "Budget": _obj({
        "budget": STR, "dimension": STR, "value": STR, "month": STR, "budget_usd": NUM,
        "spent_usd": NUM, "spent_percent": NUM, "forecast_usd": NUM,
        "forecast_percent": NUM, "forecast_basis": STR}),
    "PendingAction": _obj({
        "policy": STR, "provider": STR, "instance_id": STR, "name": _opt(STR),
        "instance_type": STR, "team": _opt(STR), "state": {"enum": ["warned", "snoozed"]},
        "since": WHEN, "deadline": _opt(WHEN), "snooze_until": _opt(WHEN), "evidence": STR,
        # what will actually happen: enforce acts at the deadline; dry-run only records it
        "mode": {"enum": ["enforce", "dry-run", "unknown"]}}),
}
for _name in ("Anomaly", "Budget", "PendingAction"):
    SCHEMAS[f"{_name}List"] = _obj({"items": {"type": "array", "items": _ref(_name)},
                                    "page": _ref("Page")})


def _param(name: str, text: str, schema: dict[str, Any] = STR, *,
           where: str = "query", many: bool = False, commas: bool = False) -> dict[str, Any]:
    """`many`: repeatable (`filter=a&filter=b`); `commas`: one value, a comma-separated list
    (`by=team,region`)."""
    s: dict[str, Any] = {"type": "array", "items": schema} if many or commas else schema
    out: dict[str, Any] = {"name": name, "in": where, "description": text, "schema": s}
    if where == "path":
        out["required"] = True
    if many:
        out["explode"] = True
    if commas:
        out["style"], out["explode"] = "form", False
        s["uniqueItems"] = True
    return out


_WHEN_TEXT = {"type": "string", "pattern": params.WHEN_PATTERN}
WINDOW = [
    _param("window", "How far back from now (a duration: 1d, 7d, 30d; default 7d; at most "
           "400 days).", _WHEN_TEXT),
    _param("since", "Start: a duration back from now or an RFC 3339 date or date-time "
           "(2026-11-01); wins over window; before until.", _WHEN_TEXT),
    _param("until", "End: a duration back from now or an RFC 3339 date or date-time "
           "(default now).", _WHEN_TEXT),
]
PAGING = [_param("limit", "Rows per page (default console.page_size).",
                 {**INT, "minimum": 1, "maximum": params.MAX_LIMIT}),
          _param("offset", "Rows to skip.", {**INT, "minimum": 0, "maximum": params.MAX_OFFSET})]
FILTER = _param("filter", "DIMENSION=VALUE, repeatable (team=research).",
                {"type": "string", "pattern": params.FILTER_PATTERN}, many=True)


def _get(summary: str, schema: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    def answer(text: str, name: str) -> dict[str, Any]:
        return {"description": text,
                "content": {"application/json": {"schema": _ref(name)}}}

    return {"get": {"summary": summary, "parameters": params, "responses": {
        "200": answer("OK", schema), "400": answer("A parameter it cannot use", "Error"),
        "401": answer("Not logged in", "Error"), "404": answer("Not found", "Error")}}}


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "costguard report API", "version": "1",
                 "description": "The figures of `costguard report`, `explain`, `recommend`, "
                 "`anomaly list` and `budget status` as JSON, with the console's login."},
        "paths": {
            "/api/v1/spend": _get("Spend grouped by dimensions (costguard report)", "Spend", [
                *WINDOW, _param("by", "Dimensions to group by, comma-separated (team,region); "
                                "`_` or `-` between words.", {"enum": params.BY_NAMES},
                                commas=True),
                FILTER, *PAGING]),
            "/api/v1/instances/{id}": _get(
                "One instance explained (costguard explain)", "Explanation",
                [_param("id", "Instance id or name.",
                        {"type": "string", "pattern": params.ID_PATTERN}, where="path"),
                 *WINDOW]),
            "/api/v1/recommendations": _get(
                "Underused GPU instances and their fits (costguard recommend)",
                "Recommendations", [FILTER, _param("all", "Every GPU instance judged, not "
                                                   "only the underused.", BOOL), *PAGING]),
            "/api/v1/anomalies": _get("Spend anomalies (costguard anomaly list)",
                                      "AnomalyList", [*WINDOW, *PAGING]),
            "/api/v1/budgets": _get("Budgets this month (costguard budget status)",
                                    "BudgetList", PAGING),
            "/api/v1/pending": _get("Warned and snoozed instances", "PendingActionList",
                                    PAGING),
        },
        "components": {"schemas": SCHEMAS},
    }
