"""What a Prometheus or an API server answers is input: an error, a login page, an endless
body, NaN, a refusal. Each is a clear error or a gap, never a traceback, never held whole
in memory, never the token in a message. Real HTTP servers on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

import costguard.k8s.api as api_module
import costguard.k8s.prometheus as prom_module
from costguard.clock import ManualClock
from costguard.errors import ProviderError
from costguard.k8s.api import KubeApi
from costguard.k8s.prometheus import PrometheusClient, PrometheusError
from costguard.k8s.provider import KubernetesProvider
from costguard.k8s.settings import ApiSettings, KubernetesSettings
from tests.fakes.kube_api import KubeApi as FakeApi
from tests.fakes.kube_api import kubeconfig
from tests.fakes.loopback import free_port, serve

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOKEN = "s3cret-prometheus-token"


def _matrix(points: list[list[object]]) -> dict[str, object]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x", "pod": "p"}, "values": points}]}}


@pytest.fixture
def answers() -> Iterator[tuple[str, dict[str, object]]]:
    """A server answering whatever `state["answer"]` says, recording what it was asked."""
    state: dict[str, object] = {"asked": []}

    async def api(request: Request) -> Response:
        form = dict(await request.form())
        state["asked"].append((request.headers.get("authorization"), form))  # type: ignore[attr-defined]
        kind = state.get("kind", "json")
        if kind == "login":
            return PlainTextResponse("<html><body>Sign in</body></html>",
                                     media_type="text/html")
        if kind == "endless":  # far past the bound, and never a whole JSON text
            async def chunks() -> object:
                for _ in range(1024):
                    yield b'{"status":"success","data":{"resultType":"matrix","result":[' * 64
            return StreamingResponse(chunks())  # type: ignore[arg-type]
        if kind == "pieces":
            start, end = float(form["start"]), float(form["end"])
            step = float(form["step"])
            n = int((end - start) / step) + 1
            return JSONResponse(_matrix([[start + k * step, "1"] for k in range(n)]))
        status = int(state.get("status", 200))  # type: ignore[call-overload]
        if "raw" in state:
            return Response(str(state["raw"]), media_type="application/json")
        return JSONResponse(state["answer"], status_code=status)

    app = Starlette(routes=[Route("/api/v1/query", api, methods=["POST"]),
                            Route("/api/v1/query_range", api, methods=["POST"])])
    with serve(app) as url:
        yield url, state


def _client(url: str) -> PrometheusClient:
    return PrometheusClient(url, cluster="ml", token=SecretStr(TOKEN), timeout=5)


def test_an_api_error_says_what_prometheus_said(answers: tuple[str, dict[str, object]]
                                                ) -> None:
    url, state = answers
    state.update(status=400, answer={"status": "error", "errorType": "bad_data",
                                     "error": "1:14: parse error: unexpected character"})
    with pytest.raises(PrometheusError, match="bad_data: 1:14: parse error") as err:
        _client(url).query("up{", T0)
    assert TOKEN not in str(err.value)
    assert state["asked"][0][0] == f"Bearer {TOKEN}"  # type: ignore[index]


def test_a_login_page_is_not_an_answer(answers: tuple[str, dict[str, object]]) -> None:
    url, state = answers
    state["kind"] = "login"
    with pytest.raises(PrometheusError, match=r"not a Prometheus API answer \(is prometheus_url"):
        _client(url).query("up", T0)


def test_an_endless_answer_is_cut_at_the_bound(answers: tuple[str, dict[str, object]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url, state = answers
    state["kind"] = "endless"
    monkeypatch.setattr(prom_module, "MAX_BYTES", 2**20)
    with pytest.raises(PrometheusError, match="answer over 1 MiB"):
        _client(url).query_range("up", T0, T0 + timedelta(hours=1), timedelta(minutes=1))


def test_nan_and_infinite_samples_are_no_samples(answers: tuple[str, dict[str, object]]
                                                 ) -> None:
    url, state = answers
    state["answer"] = _matrix([[T0.timestamp(), "NaN"], [T0.timestamp() + 60, "+Inf"],
                               [T0.timestamp() + 120, "0.5"]])
    (series,) = _client(url).query_range("x", T0, T0 + timedelta(minutes=2),
                                         timedelta(minutes=1))
    assert series.points == [(T0.timestamp() + 120, 0.5)]


def test_samples_out_of_any_date_and_numbers_past_forty_digits_are_not_taken(
        answers: tuple[str, dict[str, object]]) -> None:
    url, state = answers
    state["answer"] = _matrix([[-5, "1"], [253402300800 * 1000, "1"],
                               [T0.timestamp(), "0.5"]])
    (series,) = _client(url).query_range("x", T0, T0 + timedelta(minutes=2),
                                         timedelta(minutes=1))
    assert series.points == [(T0.timestamp(), 0.5)]  # year 10,000 and 1969: no samples
    state["answer"] = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [T0.timestamp(), 1]}]}}
    state["raw"] = '{"status":"success","data":{"resultType":"vector","result":[' \
        '{"metric":{},"value":[' + "9" * 5000 + ',"1"]}]}}'
    with pytest.raises(PrometheusError, match="not a Prometheus API answer"):
        _client(url).query("x", T0)


def test_a_malformed_sample_is_a_clear_error(answers: tuple[str, dict[str, object]]) -> None:
    url, state = answers
    state["answer"] = _matrix([["soon", "1"]])
    with pytest.raises(PrometheusError, match=r"a sample that is not \[time, value\]"):
        _client(url).query_range("x", T0, T0 + timedelta(minutes=2), timedelta(minutes=1))


def test_a_long_range_is_asked_in_pieces_and_merged(answers: tuple[str, dict[str, object]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    url, state = answers
    state["kind"] = "pieces"
    monkeypatch.setattr(prom_module, "MAX_POINTS", 10)
    client = _client(url)
    (series,) = client.query_range("x", T0, T0 + timedelta(minutes=24), timedelta(minutes=1))
    assert client.calls == 3
    stamps = [t for t, _ in series.points]
    assert stamps == [T0.timestamp() + 60 * k for k in range(25)]  # none twice, none lost


def test_an_api_server_that_refuses_is_a_provider_error(tmp_path: Path) -> None:
    fake = FakeApi()
    fake.forbidden.add(("list", "deployments"))
    with serve(fake.app()) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, token="kube-token-xyz"))
        api = KubeApi("ml", ApiSettings(kubeconfig=tmp_path / "kc"))
        with pytest.raises(ProviderError, match=r"list deployments: HTTP 403 \(Forbidden\) "
                           r"deployments is forbidden") as err:
            api.list("deployments")
        assert "kube-token-xyz" not in str(err.value)
        fake.installed.discard("notebooks")
        assert api.list("notebooks") is None  # Kubeflow not installed: no notebooks


@pytest.mark.parametrize("expired", [1, 2])
def test_a_list_whose_continue_token_expires_is_read_again_whole(
        tmp_path: Path, expired: int, caplog: pytest.LogCaptureFixture) -> None:
    """A list of many pages outlived its continue token (410 Expired): it failed the
    cluster's read. It is read again from its start, once; twice is a retryable error."""
    fake = FakeApi()
    for i in range(1_200):  # three pages of 500
        fake.add("deployments", f"ns{i % 7}", f"d{i:04d}")
    with serve(fake.app()) as url:
        (tmp_path / "kc").write_text(kubeconfig(url))
        api = KubeApi("ml", ApiSettings(kubeconfig=tmp_path / "kc"))
        fake.expire_continue = expired
        if expired == 2:
            with pytest.raises(ProviderError, match="continue token expired twice") as err:
                api.list("deployments")
            assert err.value.retryable
            return
        listed = api.list("deployments")
    assert listed is not None and len(listed) == 1_200
    assert len({(d.namespace, d.name) for d in listed}) == 1_200  # none twice, none missing
    asked = [q.get("continue") for _, path, _, q in fake.requests
             if path == "/apis/apps/v1/deployments"]
    assert asked == [None, "500", None, "500", "1000"]  # from the start again, whole
    assert "the continue token expired; reading the list again" in caplog.text


def test_an_oversized_api_answer_is_refused(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi()
    for i in range(50):
        fake.add("deployments", "ns", f"d{i}", labels={"pad": "x" * 1000})
    monkeypatch.setattr(api_module, "MAX_BYTES", 10_000)
    with serve(fake.app()) as url:
        (tmp_path / "kc").write_text(kubeconfig(url))
        api = KubeApi("ml", ApiSettings(kubeconfig=tmp_path / "kc"))
        with pytest.raises(ProviderError, match="answer over"):
            api.list("deployments")


def test_an_unreadable_cluster_is_a_gap_and_the_cycle_goes_on(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text(kubeconfig(f"http://127.0.0.1:{free_port()}"))
    settings = KubernetesSettings.model_validate({"clusters": [{
        "name": "ml", "prometheus_url": f"http://127.0.0.1:{free_port()}",
        "api": {"kubeconfig": str(tmp_path / "kc")}}]})
    inventory = KubernetesProvider(settings, ManualClock(T0)).list_instances()
    assert inventory.instances == []
    (gap,) = inventory.gaps
    assert gap.provider == "k8s" and gap.scope == "ml"
    assert "cannot reach Prometheus" in gap.error


def test_a_missing_kubeconfig_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="cannot load the cluster's credentials"):
        KubeApi("ml", ApiSettings(kubeconfig=tmp_path / "nope"))


def test_a_nul_in_one_objects_free_text_does_not_hide_the_others(tmp_path: Path) -> None:
    """An annotation or an environment value may hold any text, NUL included (the API
    server sends it as \\u0000): that string is mended, the list is read whole. Refused,
    one odd annotation hid every workload of the cluster."""
    fake = FakeApi()
    fake.add("deployments", "ns", "odd", annotations={"note": "a\x00b"},
             spec={"template": {"spec": {"containers": [
                 {"name": "c", "env": [{"name": "SEP", "value": "\x00"}]}]}}})
    fake.add("deployments", "ns", "plain", labels={"team": "vision"})
    with serve(fake.app()) as url:
        (tmp_path / "kc").write_text(kubeconfig(url))
        api = KubeApi("ml", ApiSettings(kubeconfig=tmp_path / "kc"))
        listed = api.list("deployments")
    assert listed is not None
    by_name = {o.name: o for o in listed}
    assert sorted(by_name) == ["odd", "plain"]
    assert by_name["odd"].annotations == {"note": "a\ufffdb"}
    (container,) = by_name["odd"].body["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [{"name": "SEP", "value": "\ufffd"}]
    assert by_name["plain"].labels == {"team": "vision"}


def test_a_nul_in_a_prometheus_label_is_mended_not_refused(
        answers: tuple[str, dict[str, object]]) -> None:
    url, state = answers
    state.update(answer={"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x", "pod": "p\x00"}, "values": [[T0.timestamp(), "1"]]}]}})
    (series,) = _client(url).query_range("x", T0, T0 + timedelta(minutes=1),
                                         timedelta(minutes=1))
    assert series.labels["pod"] == "p\ufffd"
