"""The underused analysis per pod: the instance verdict (GPUs used of those requested,
signal mean, VRAM, bottleneck) over each GPU pod's readings from the real Prometheus, with
the pod's CPU (cAdvisor) against its request, and what requesting less saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.k8s.allocate import allocate
from costguard.k8s.settings import CostWeights
from costguard.k8s.underused import PodEfficiency, judge_pods
from costguard.model import HOURS_PER_MONTH
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import Bottleneck
from tests.k8s.history import History
from tests.k8s.test_cluster_read import P4D, PRICED, cfg, read
from tests.k8s.test_cluster_report import _config

# three hours of history: judged with an hour's minimum instead of a day's
SETTINGS = RecommendSettings(min_hours=1)


def _judged(history: History) -> dict[str, PodEfficiency]:
    r = read(history)
    lines = allocate(r, PRICED, cfg(history.url))
    return {p.line.pod: p for p in judge_pods(r, lines, SETTINGS)}


def test_each_gpu_pod_gets_the_instance_verdict_with_its_own_cpu(history: History) -> None:
    pods = _judged(history)
    assert set(pods) == {"train-llm-x7k2p", "notebook-alice-0", "chat-infer-7d9f8-abcde",
                         "embed-0", "embed-1", "sweep-0", "debug",
                         "prep-7c9d8-x2k4m"}  # no DaemonSet pod
    verdict = {name: p.efficiency.bottleneck for name, p in pods.items()}
    assert verdict == {
        "train-llm-x7k2p": Bottleneck.UNUSED_GPUS,  # 2 of its 4 GPUs busy, CPU 18 of 48
        "notebook-alice-0": Bottleneck.IDLE, "chat-infer-7d9f8-abcde": Bottleneck.IDLE,
        "embed-0": Bottleneck.LATENCY_BOUND,  # SM 25 % on its slice, one core of four
        "embed-1": Bottleneck.IDLE,
        "sweep-0": Bottleneck.CAUSE_UNKNOWN,  # GPU low, no cAdvisor series for it
        "debug": Bottleneck.INSUFFICIENT_DATA,  # its exporter maps no GPU to pods
        "prep-7c9d8-x2k4m": Bottleneck.IDLE,  # its CPU busy, its GPU not
    }
    train = pods["train-llm-x7k2p"].efficiency
    assert (train.gpus_used, train.gpus_paid, train.used_gpus) == (2, 4, (0, 1))
    assert train.host_cpu_p95 == pytest.approx(37.5, abs=0.1)  # 18 cores of 48 requested
    assert train.host_cpus == 48
    assert any("pod CPU p95 37.5% of 48 cores requested" in e for e in train.evidence), (
        train.evidence)
    assert not any("iowait" in e for e in train.evidence)  # a pod's is not measured
    embed = pods["embed-0"].efficiency
    assert embed.underused and embed.gpu_mean == pytest.approx(25, abs=2)
    assert embed.host_cpu_p95 == pytest.approx(25.0, abs=0.1)
    assert embed.vram_peak_bytes == 14000 * 2**20  # its slice's memory
    assert "pod CPU not measured" in pods["sweep-0"].efficiency.evidence
    assert not pods["debug"].efficiency.underused  # no data is not underused


def test_requesting_only_the_gpus_used_is_priced_at_the_nodes_gpu_rate(
        history: History) -> None:
    pods = _judged(history)
    train = pods["train-llm-x7k2p"]
    w = CostWeights()
    gpu_rate = P4D * w.gpu / (8 * w.gpu + 96 * w.cpu + 1152 * w.memory_gib)
    assert train.fit_gpus == 2
    assert train.usd_per_gpu_hour == pytest.approx(gpu_rate, rel=1e-3)
    assert train.monthly_usd == pytest.approx(2 * gpu_rate * HOURS_PER_MONTH, rel=1e-3)
    assert train.underused_usd == train.spend_usd > 0
    # no fit in GPUs where every GPU requested was used, or none was
    for name in ("embed-0", "sweep-0", "notebook-alice-0", "debug"):
        assert pods[name].fit_gpus is None and pods[name].monthly_usd == 0


def _recommend(tmp_path: Path, history: History, *args: str, columns: int = 200) -> str:
    runner = CliRunner(env={"COLUMNS": str(columns)})
    config = _config(tmp_path, history.url, extra="recommend: {min_hours: 1}\n")
    result = runner.invoke(app, ["recommend", "--config", str(config), "--window", "5h",
                                 *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_recommend_by_pod_names_each_underused_pod_and_its_fit(tmp_path: Path,
                                                               history: History) -> None:
    text = _recommend(tmp_path, history, "--by", "pod", columns=80)
    assert "3 of 8 GPU pods underused" in text.replace("\n", " ")
    assert "research/train-llm-x7k2p" in text and "unused-gpus" in text
    assert "fit: request 2 x nvidia.com/gpu instead of 4" in text
    assert "2 GPUs" in text  # the table's column
    assert "serving/embed-0" in text and "latency-bound" in text
    assert "research/debug" not in text  # not judged, so not underused: left out
    table = text.split("\n\n")[0].splitlines()  # the headline and table, wrapped to fit;
    assert max(map(len, table)) <= 80  # each pod's details follow, one fact per line


def test_recommend_for_a_cluster_as_json_csv_and_by_team(tmp_path: Path,
                                                         history: History) -> None:
    doc = json.loads(_recommend(tmp_path, history, "--cluster", "ml-prod", "--all",
                                "--format", "json"))
    assert doc["kind"] == "kubernetes" and doc["clusters"] == ["ml-prod"]
    assert doc["summary"]["gpu_pods"] == 8 and doc["summary"]["insufficient_data"] == 1
    train = next(i for i in doc["items"] if i["pod"] == "train-llm-x7k2p")
    assert train["workload"] == "CronJob/nightly-train" and train["team"] == "nlp"
    assert train["fit"]["gpus"] == 2 and train["fit"]["monthly_savings_usd"] > 0
    assert train["measured"]["gpus_used"] == 2
    csv = _recommend(tmp_path, history, "--cluster", "ml-prod", "--format", "csv")
    header, *rows = csv.splitlines()
    assert header.startswith("cluster,namespace,workload,pod,node,team,gpu_resource")
    assert len(rows) == 3  # the underused: idle pods are the idle policy's case
    teams = _recommend(tmp_path, history, "--cluster", "ml-prod", "--by", "team")
    assert "nlp" in teams and "platform" in teams


def test_recommend_for_an_unknown_cluster_names_the_configured_ones(tmp_path: Path,
                                                                    history: History) -> None:
    runner = CliRunner()
    config = _config(tmp_path, history.url)
    result = runner.invoke(app, ["recommend", "--config", str(config), "--cluster", "nope"])
    assert result.exit_code != 0
    assert "no Kubernetes cluster named 'nope' (configured: ml-prod)" in result.output


def test_judging_a_pod_by_its_steps_is_judging_it_by_its_minutes(history: History) -> None:
    """One cell per 5-minute reading (what judge_pods asks) gives the verdict the minutes
    give: every count, share, mean and percentile the same."""
    from costguard.k8s.underused import POD_WORDS, _minutes
    from costguard.telemetry.efficiency import judge

    r = read(history)
    for pod in r.pods.values():
        if pod.requests.gpu_units <= 0:
            continue
        minutes = _minutes(r.cluster, pod)
        by = {step: judge(minutes, window_start=r.start, window_end=r.end,
                          gpu_count=pod.requests.gpu_units, settings=SETTINGS,
                          words=POD_WORDS, step_minutes=step) for step in (1, 5)}
        fine, coarse = by[1].model_dump(), by[5].model_dump()
        assert coarse.keys() == fine.keys()
        for key, value in fine.items():
            if isinstance(value, float):
                assert coarse[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
            else:
                assert coarse[key] == value, (pod.key, key)
