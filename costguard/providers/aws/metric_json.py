"""GetMetricData, asked and read for the fields costguard uses.

A GetMetricData answer is up to 500 results of up to 100,800 datapoints; botocore walks
every one through its generic shape parser (a call per timestamp and per value). At
organisation scale that walk, with the request's parameter validation, was a third of the
client's CPU per metrics call. costguard builds every query itself (`metrics.gpu_queries`,
`cpu_queries`), so the CloudWatch clients skip parameter validation
(`sessions.ClientFactory`), and their answers are read here.

`read_get_metric_data` is registered on costguard's CloudWatch clients for botocore's
`before-parse.cloudwatch.GetMetricData` event. On a 200 answer to a client speaking the JSON
protocol (what botocore asks for; botocore chooses its parser by the client's protocol, not
by the answer's content type, and so does this) it reads each result's `Id`,
`StatusCode`, `Timestamps` (epoch seconds, as UTC datetimes, as botocore gives them) and
`Values`, and the `NextToken` and `Messages` of the page; botocore then parses an empty
body for the response metadata. Errors, another protocol (CBOR, query XML) or a body that
is not a JSON object are left to botocore. tests/providers/aws/test_metric_json.py checks
the result equals botocore's own parse of the same answer.

The request's 500 queries took botocore's serializer as long again (a call per member of
each query). In the JSON protocol a query is written as given, so `hold_queries`
(`before-parameter-build`) takes them out of the parameters as JSON text, botocore writes
the rest (times, token: its own way), and `write_queries` (`before-call`, before signing)
puts them back at the head of the body: the same bytes botocore writes (the tests compare
them for costguard's queries). Another protocol, or queries JSON cannot write, stay with
botocore.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

EVENT = "before-parse.cloudwatch.GetMetricData"
BUILD_EVENT = "before-parameter-build.cloudwatch.GetMetricData"
CALL_EVENT = "before-call.cloudwatch.GetMetricData"
_HELD = "costguard_metric_data_queries"  # the request context's key for the held queries
_KEPT = ("Id", "Label", "StatusCode", "Messages")


def _result(raw: dict[str, Any], when: dict[Any, datetime]) -> dict[str, Any]:
    """One result as botocore gives it; its timestamps from `when`, the datetimes of the
    epoch seconds the answer's results share (every series of a call answers the same
    minutes: one datetime each, not one a point)."""
    out = {k: raw[k] for k in _KEPT if k in raw}
    out["Timestamps"] = [when.get(t) or _datetime(when, t) for t in raw.get("Timestamps", [])]
    out["Values"] = [float(v) for v in raw.get("Values", [])]
    return out


def _datetime(when: dict[Any, datetime], t: Any) -> datetime:
    made = when[t] = datetime.fromtimestamp(t, UTC)
    return made


def read_get_metric_data(response_dict: dict[str, Any],
                         customized_response_dict: dict[str, Any], operation_model: Any,
                         **_: Any) -> None:
    """botocore `before-parse` handler for GetMetricData (see the module's doc)."""
    if response_dict.get("status_code") != 200 or _protocol(operation_model) != "json":
        return
    try:
        body = json.loads(response_dict["body"])
        if not isinstance(body, dict):
            return
        when: dict[Any, datetime] = {}
        results = [_result(r, when) for r in body.get("MetricDataResults", [])]
    except (ValueError, TypeError, AttributeError, OverflowError, OSError):
        return  # botocore's own parser reads (or reports) it
    customized_response_dict["MetricDataResults"] = results
    for key in ("NextToken", "Messages"):
        if key in body:
            customized_response_dict[key] = body[key]
    response_dict["body"] = b"{}"


def _protocol(operation_model: Any) -> str | None:
    """The protocol botocore parses the answer in: the client's, whatever the answer's
    content type says (moto's is `text`; CloudWatch's `application/x-amz-json-1.0`)."""
    service = getattr(operation_model, "service_model", None)
    return getattr(service, "resolved_protocol", None)


def hold_queries(params: dict[str, Any], model: Any, context: dict[str, Any],
                 **_: Any) -> None:
    """botocore `before-parameter-build` handler for GetMetricData (see the module's doc)."""
    queries = params.get("MetricDataQueries")
    if (_protocol(model) != "json" or not isinstance(queries, list)
            or next(iter(params)) != "MetricDataQueries"):
        return  # written at the head of the body: only where botocore would write them
    try:
        encoded = json.dumps(queries).encode()
    except (TypeError, ValueError):
        return  # not plain JSON data: botocore's serializer writes (or reports) it
    context[_HELD] = encoded
    del params["MetricDataQueries"]


def write_queries(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """botocore `before-call` handler for GetMetricData: the held queries back into the
    request's body (`params` is the serialized request)."""
    encoded = context.pop(_HELD, None)
    if encoded is None:
        return
    rest = params["body"]
    params["body"] = (b'{"MetricDataQueries": ' + encoded
                      + (b"}" if rest == b"{}" else b", " + rest[1:]))
