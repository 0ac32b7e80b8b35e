"""costguard's GetMetricData reader gives what botocore's own parse of the same answer gives:
on moto's answers (through a client), and on an answer shaped like CloudWatch's JSON
protocol documentation; other protocols and errors are left to botocore. Its request
writer sends the bytes botocore's serializer writes, for the queries costguard builds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from aws_helpers import REGION
from botocore.config import Config
from botocore.parsers import ResponseParserFactory

from costguard.providers.aws import metrics as cw
from costguard.providers.aws.metric_json import (
    BUILD_EVENT,
    CALL_EVENT,
    EVENT,
    hold_queries,
    read_get_metric_data,
    write_queries,
)

NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def _put(cw: Any, instances: int, minutes: int) -> None:
    for n in range(instances):
        cw.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": "nvidia_smi_utilization_gpu", "Value": float(n * 7 + k % 13) / 3,
             "Unit": "Percent", "Timestamp": NOW - timedelta(minutes=k),
             "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n:017x}"}]}
            for k in range(1, minutes + 1)])


def _queries(instances: int) -> list[dict[str, Any]]:
    return [{"Id": f"g{n}", "ReturnData": True, "MetricStat": {
        "Metric": {"Namespace": "CWAgent", "MetricName": "nvidia_smi_utilization_gpu",
                   "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n:017x}"}]},
        "Period": 60, "Stat": "Average"}} for n in range(instances)]


def _pages(cw: Any, **kwargs: Any) -> list[dict[str, Any]]:
    pages = []
    while True:
        page = cw.get_metric_data(**kwargs)
        page.pop("ResponseMetadata")
        pages.append(page)
        if not page.get("NextToken"):
            return pages
        kwargs["NextToken"] = page["NextToken"]


@pytest.mark.usefixtures("moto")
def test_the_reader_equals_botocores_parse_of_moto_answers_page_by_page() -> None:
    plain: Any = boto3.client("cloudwatch", region_name=REGION)
    lean: Any = boto3.client("cloudwatch", region_name=REGION,
                             config=Config(parameter_validation=False))
    read: list[int] = []

    def reader(customized_response_dict: dict[str, Any], **kwargs: Any) -> None:
        read_get_metric_data(customized_response_dict=customized_response_dict, **kwargs)
        read.append(len(customized_response_dict.get("MetricDataResults", [])))

    lean.meta.events.register(EVENT, reader)
    lean.meta.events.register(BUILD_EVENT, hold_queries)
    lean.meta.events.register(CALL_EVENT, write_queries)
    _put(plain, 6, 30)
    kwargs = {"MetricDataQueries": _queries(6), "StartTime": NOW - timedelta(hours=1),
              "EndTime": NOW, "ScanBy": "TimestampAscending"}
    want, got = _pages(plain, **kwargs), _pages(lean, **kwargs)
    assert got == want
    # the reader read every page itself, though moto's content type is not CloudWatch's
    assert len(read) == len(got) and all(n == 6 for n in read)
    points = [t for page in got for r in page["MetricDataResults"] for t in r["Timestamps"]]
    assert len(points) == 180 and all(t.utcoffset() == timedelta(0) for t in points)


def _service() -> Any:
    return botocore.session.get_session().get_service_model("cloudwatch")


# GetMetricData's answer in the JSON protocol as CloudWatch's API reference shows it (epoch
# seconds, a partial result with its message, a token for the next page)
DOCUMENTED = {
    "MetricDataResults": [
        {"Id": "g0", "Label": "nvidia_smi_utilization_gpu", "StatusCode": "Complete",
         "Timestamps": [1764158400, 1764158460.0, 1764158520],
         "Values": [12.5, 0, 100]},
        {"Id": "c0", "Label": "CPUUtilization", "StatusCode": "PartialData",
         "Messages": [{"Code": "MaxDatapointsExceeded", "Value": "More data is available"}],
         "Timestamps": [], "Values": []},
    ],
    "NextToken": "eyJuZXh0IjoxfQ==",
    "Messages": [{"Code": "Warning", "Value": "Some metrics are throttled"}],
}


def _response(body: bytes, status: int = 200,
              ctype: str = "application/x-amz-json-1.0") -> dict[str, Any]:
    return {"status_code": status, "body": body,
            "headers": {"content-type": ctype, "x-amzn-requestid": "req-1"}}


def test_the_reader_equals_botocores_parse_of_a_documented_answer() -> None:
    body = json.dumps(DOCUMENTED).encode()
    shape = _service().operation_model("GetMetricData").output_shape
    want = ResponseParserFactory().create_parser("json").parse(_response(body), shape)
    response, custom = _response(body), {}
    read_get_metric_data(response_dict=response, customized_response_dict=custom,
                         operation_model=_model("json"))
    got = ResponseParserFactory().create_parser("json").parse(response, shape)
    got.update(custom)  # what botocore's endpoint does with the customized dict
    assert got == want
    assert got["MetricDataResults"][0]["Timestamps"][1] == datetime(2025, 11, 26, 12, 1,
                                                                      tzinfo=UTC)


@pytest.mark.parametrize("response", [
    _response(b'{"__type": "InvalidParameterValueException", "message": "bad"}', 400),
    _response(b"\xa1\x71MetricDataResults\x80", ctype="application/cbor"),
    _response(b"<GetMetricDataResponse/>", ctype="text/xml"),
    _response(b"[1, 2]"),
    _response(b"{not json"),
    _response(b'{"MetricDataResults": [{"Id": "g0", "Timestamps": ["x"], "Values": [1]}]}'),
])
def test_errors_other_protocols_and_unreadable_bodies_are_left_to_botocore(
        response: dict[str, Any]) -> None:
    body, custom = response["body"], {}
    read_get_metric_data(response_dict=response, customized_response_dict=custom,
                         operation_model=_model("json"))
    assert custom == {} and response["body"] == body


@pytest.mark.parametrize("protocol", ["smithy-rpc-v2-cbor", "query", None])
def test_a_client_speaking_another_protocol_is_left_to_botocore(protocol: str | None) -> None:
    """botocore picks its parser by the client's protocol: a JSON body is read here only
    when that is JSON, whatever the answer's content type."""
    response, custom = _response(json.dumps(DOCUMENTED).encode()), {}
    read_get_metric_data(response_dict=response, customized_response_dict=custom,
                         operation_model=_model(protocol) if protocol else None)
    assert custom == {}


def test_the_content_type_does_not_decide() -> None:
    """moto answers `text`, a proxy may answer `application/json`: a JSON-protocol client's
    answer is read either way, as botocore's JSON parser would read it."""
    for ctype in ("text", "application/json", ""):
        response, custom = _response(json.dumps(DOCUMENTED).encode(), ctype=ctype), {}
        read_get_metric_data(response_dict=response, customized_response_dict=custom,
                             operation_model=_model("json"))
        assert len(custom["MetricDataResults"]) == 2 and response["body"] == b"{}"


def _sent(client: Any, **kwargs: Any) -> bytes:
    """The body `client` would send for GetMetricData(**kwargs) (stopped before sending)."""
    sent: list[bytes] = []

    def stop(request: Any, **_: Any) -> Any:
        sent.append(request.body)
        raise _Stop

    event = "before-send.cloudwatch.GetMetricData"
    client.meta.events.register(event, stop)
    try:
        with pytest.raises(_Stop):
            client.get_metric_data(**kwargs)
    finally:
        client.meta.events.unregister(event, stop)
    return sent[0]


class _Stop(Exception):
    pass


def _clients() -> tuple[Any, Any]:
    config = Config(parameter_validation=False)
    plain: Any = boto3.client("cloudwatch", region_name=REGION, config=config)
    lean: Any = boto3.client("cloudwatch", region_name=REGION, config=config)
    lean.meta.events.register(BUILD_EVENT, hold_queries)
    lean.meta.events.register(CALL_EVENT, write_queries)
    return plain, lean


def test_the_writer_sends_the_bytes_botocore_writes_for_costguards_queries() -> None:
    plain, lean = _clients()
    series = [cw.Series(f"i-{n:017x}", cw.ALL_GPUS if n % 2 else n % 3, cw.GPU_UTIL,
                        (("InstanceId", f"i-{n:017x}"), ("index", str(n % 3))))
              for n in range(40)]
    queries = cw.gpu_queries(series, "CWAgent", 300)
    queries += cw.cpu_queries([s.instance_id for s in series], 300)
    at = datetime(2026, 11, 27, 12, 0, 30, 250_000, tzinfo=UTC)
    walked: list[list[str]] = []  # what botocore's serializer was given, by the lean client
    inner = lean._serializer.serialize_to_request
    lean._serializer.serialize_to_request = lambda p, m: walked.append(list(p)) or inner(p, m)
    for extra in ({}, {"NextToken": "t-\u00e9\"2"}, {"ScanBy": "TimestampAscending",
                                                      "MaxDatapoints": 100_800}):
        kwargs = {"MetricDataQueries": queries, "StartTime": at - timedelta(hours=1),
                  "EndTime": at, **extra}
        assert _sent(lean, **kwargs) == _sent(plain, **kwargs)
    assert walked and all("MetricDataQueries" not in keys for keys in walked)


def test_queries_not_at_the_head_or_not_plain_json_are_left_to_botocore() -> None:
    plain, lean = _clients()
    times = {"StartTime": NOW - timedelta(hours=1), "EndTime": NOW}
    later = {**times, "MetricDataQueries": _queries(2)}  # botocore writes them last
    assert _sent(lean, **later) == _sent(plain, **later)
    assert json.loads(_sent(lean, **later))["MetricDataQueries"] == _queries(2)
    odd = {"MetricDataQueries": [{**_queries(1)[0], "Label": b"bytes"}], **times}
    context: dict[str, Any] = {}
    hold_queries(odd, _model("json"), context)
    assert context == {} and "MetricDataQueries" in odd


def test_another_protocol_keeps_botocores_serializer() -> None:
    params: dict[str, Any] = {"MetricDataQueries": _queries(1), "StartTime": NOW}
    for protocol in ("query", "smithy-rpc-v2-cbor"):
        context: dict[str, Any] = {}
        hold_queries(params, _model(protocol), context)
        assert context == {} and params["MetricDataQueries"] == _queries(1)
    request = {"body": b"{}"}
    write_queries(request, {})  # nothing held: nothing written
    assert request == {"body": b"{}"}


def _model(protocol: str) -> Any:
    class Service:
        resolved_protocol = protocol

    class Operation:
        service_model = Service()

    return Operation()
