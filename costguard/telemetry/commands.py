"""Plain functions behind `costguard agent`, `costguard agent record` and `... replay`.

The Typer CLI (costguard/cli.py) parses options and calls these; they raise costguard
errors (TraceError, ConfigError, NvmlUnavailable) with messages fit for a user.
"""

from __future__ import annotations

import json
import logging
import signal as signals
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx

from costguard.bearer import token_problem
from costguard.clock import Clock, SystemClock
from costguard.errors import ConfigError
from costguard.model import GpuSignal
from costguard.policy.base import duration_arg
from costguard.telemetry.activity import ActivityReader, ActivityRecorder
from costguard.telemetry.agent import Agent, AgentSettings, Publisher, Sampler
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.classify import SignalChoice, classify
from costguard.telemetry.host import HostSampler
from costguard.telemetry.identity import (
    Identity,
    exchange_proof,
    fetch_proof,
    resolve_identity,
)
from costguard.telemetry.neuron import NeuronMonitorSampler
from costguard.telemetry.nvml import NvmlSampler, NvmlUnavailable
from costguard.telemetry.selfstop import LocalHook, SelfStop, stop_this_instance, wall
from costguard.telemetry.summary import summarize_windows, window_start
from costguard.telemetry.trace import NvmlSample, TraceWriter, read_trace

log = logging.getLogger(__name__)
ReplayFormat = Literal["json", "text"]

def parse_duration(text: str) -> timedelta:
    """`30s`, `45m`, `2h`, `1d`, as in policies; a ConfigError names the fix."""
    try:
        value = duration_arg(text)
    except ValueError as exc:
        raise ConfigError(f"cannot read duration {text!r}: {exc}") from None
    if value <= timedelta(0):
        raise ConfigError(f"duration {text!r} must be positive")
    return value


def replay(
    path: str | Path,
    window: timedelta = timedelta(seconds=30),
    fmt: ReplayFormat = "json",
    signal: SignalChoice = "auto",
    below: float = 5.0,
    note: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """Classify a recorded trace window by window; one line per window (`note` is told
    of a last line the recording cut short, which is left out).

    Windows tile from the first sample's whole second. JSON lines carry
    {"start", "end" (Unix s), "verdict", "signal", "value", "evidence", "coverage",
    "phase" (the most common phase label, when the trace has them), "gpus", "samples"}.
    """
    trace = read_trace(path)
    if trace.torn_line is not None and note is not None:
        note(f"note: {path}:{trace.torn_line}: the last line is cut short (the recording "
             "stopped while writing it); replayed without it")
    if not trace.samples:
        raise ConfigError(f"{path}: the trace has no samples")
    if window <= timedelta(0):
        raise ConfigError("--window must be positive, e.g. 30s")
    origin = float(int(min(s.t for s in trace.samples)))
    # the GPUs the trace holds, whatever their indices on the host (a trace of GPU 3 alone
    # is one GPU, not four of which three said nothing)
    indices = {gpu: n for n, gpu in enumerate(sorted({s.gpu for s in trace.samples}))}
    samples = [s if s.gpu == indices[s.gpu] else replace(s, gpu=indices[s.gpu])
               for s in trace.samples]
    minutes = summarize_windows(
        samples, provider="sim", instance_id=Path(path).stem, window=window, origin=origin
    )
    gpu_count = len(indices)
    phases: dict[float, Counter[str]] = {}
    for s in trace.samples:
        phases.setdefault(window_start(s.t, window, origin), Counter())[s.phase or ""] += 1
    for start in sorted(phases):
        begin = datetime.fromtimestamp(start, UTC)
        inside = [m for m in minutes if m.minute == begin]
        verdict = classify(
            inside,
            window_start=begin,
            window_end=begin + window,
            gpu_count=gpu_count,
            signal=signal,
            below=below,
        )
        phase = phases[start].most_common(1)[0][0] or None
        row: dict[str, Any] = {
            "start": start,
            "end": start + window.total_seconds(),
            "verdict": verdict.verdict.value,
            "signal": verdict.signal.value if isinstance(verdict.signal, GpuSignal) else None,
            "value": verdict.value,
            "coverage": round(verdict.coverage, 3),
            "evidence": verdict.evidence,
            "phase": phase,
            "gpus": gpu_count,
            "samples": sum(m.samples for m in inside),
        }
        if fmt == "json":
            yield json.dumps(row)
        else:
            when = begin.strftime("%H:%M:%S")
            label = f" [{phase}]" if phase else ""
            yield f"{when} {row['verdict']:<9} {row['signal'] or '-':<9} {verdict.evidence}{label}"


def record(
    path: str | Path,
    duration: timedelta,
    sampler: NvmlSampler,
    *,
    interval_s: float = 1.0,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    phase: str | None = None,
) -> int:
    """Sample every GPU for `duration` into a trace file; returns the samples written.

    The sampler is opened here (NvmlUnavailable when there is no driver) and closed after.
    """
    clock = clock or SystemClock()
    written = 0
    with sampler, Path(path).open("w", encoding="utf-8") as out:
        header = {**sampler.header, "period_s": interval_s}
        writer = TraceWriter(out, header)
        end = clock.now() + duration
        while clock.now() < end:
            started = clock.now()
            for s in sampler.sample():
                writer.write(s if phase is None else _with_phase(s, phase))
                written += 1
            spent = (clock.now() - started).total_seconds()
            sleep(max(0.0, interval_s - spent))
    return written


def _with_phase(sample: NvmlSample, phase: str) -> NvmlSample:
    return replace(sample, phase=phase)


def _prover(settings: AgentSettings, identity: Identity, client: httpx.Client
            ) -> Callable[[], str | None] | None:
    """How the agent gets a credential for its own instance: the cloud's signed identity
    (IMDS / GCE metadata), traded at the daemon. None when the instance was given on the
    command line or is not in a cloud: the shared token is used then."""
    if settings.instance_id or identity.provider not in ("aws", "gcp"):
        return None

    def prove() -> str | None:
        with httpx.Client(timeout=2.0) as probe:
            proof = fetch_proof(probe, identity, ec2_url=settings.ec2_metadata_url,
                                gce_url=settings.gce_metadata_url,
                                audience=settings.identity_audience)
        if proof is None:
            log.warning("no signed instance identity from the metadata server: pushing with "
                        "the shared token")
            return None
        return exchange_proof(client, settings.url, settings.token, proof)

    return prove


def open_sampler(accelerator: str, clock: Callable[[], float]
                 ) -> NvmlSampler | NeuronMonitorSampler:
    """The devices this host has, opened: NVIDIA GPUs through NVML, or AWS Trainium and
    Inferentia through neuron-monitor; `auto` tries NVML first, then neuron-monitor where
    it is installed, and says why neither could be read."""
    if accelerator in ("auto", "nvidia"):
        try:
            nvml = NvmlSampler(clock=clock)
            nvml.open()
            return nvml
        except NvmlUnavailable as exc:
            if accelerator == "nvidia" or not NeuronMonitorSampler.available():
                if accelerator == "nvidia":
                    raise
                raise NvmlUnavailable(f"{exc.reason}; and neuron-monitor (AWS Trainium/"
                                      "Inferentia) is not installed either") from None
    neuron = NeuronMonitorSampler(clock=clock)
    neuron.open()
    return neuron


def run_agent(
    settings: AgentSettings,
    *,
    sampler: Sampler | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], None] | None = None,
    warn: Callable[[str], None] = wall,
    max_ticks: int | None = None,
    cloudwatch_client: Any = None,
) -> Agent:
    """Run the agent until SIGTERM/SIGINT (or `max_ticks`); returns it for inspection."""
    if settings.publish_to == "daemon" and (not settings.url or not settings.token):
        raise ConfigError(
            "the agent needs the daemon URL and token: --url http://HOST:PORT and "
            "COSTGUARD_AGENT_TOKEN (the daemon's agent token)"
        )
    if settings.publish_to == "daemon" and (problem := token_problem(settings.token)):
        raise ConfigError(f"the agent token: {problem}")
    clock = clock or SystemClock()
    with httpx.Client(timeout=settings.timeout_s) as client:
        with httpx.Client(timeout=1.0) as probe:
            identity = resolve_identity(
                probe,
                provider=settings.provider,
                instance_id=settings.instance_id,
                ec2_url=settings.ec2_metadata_url,
                gce_url=settings.gce_metadata_url,
            )
        owned: NvmlSampler | NeuronMonitorSampler | None = None
        if sampler is None:
            owned = open_sampler(settings.accelerator, lambda: clock.now().timestamp())
            sampler = owned
        gpus = len(sampler.device_indexes)
        self_stop = None
        if settings.self_stop_after is not None:
            self_stop = SelfStop(
                after=settings.self_stop_after,
                grace=settings.self_stop_grace,
                gpu_count=gpus,
                below=settings.idle_below,
                signal=settings.signal,
                when_host_busy=settings.self_stop_when_host_busy,
                pre_stop=_local_hook(settings),
                warn=warn,
                stop=stop or stop_this_instance(identity),
            )
        record_file = (
            settings.record_path.open("a", encoding="utf-8") if settings.record_path else None
        )
        host_file = (settings.record_host_path.open("a", encoding="utf-8")
                     if settings.record_host_path else None)
        try:
            header = getattr(sampler, "header", None)
            fresh = record_file is not None and record_file.tell() == 0
            recorder = TraceWriter(record_file, header if fresh else None) if record_file else None
            agent = Agent(
                settings,
                sampler,
                identity,
                client=client,
                clock=clock,
                sleep=sleep,
                recorder=recorder,
                self_stop=self_stop,
                publisher=_publisher(settings, identity, cloudwatch_client),
                prove=_prover(settings, identity, client),
                host=HostSampler(settings.proc_path) if settings.host_metrics else None,
                activity=ActivityReader(jupyter_urls=settings.jupyter_urls, client=client)
                if settings.host_metrics else None,
                activity_recorder=ActivityRecorder(host_file) if host_file else None,
            )
            previous = _stop_on_signals(agent)
            log.info(
                "costguard agent for %s:%s, %d GPUs", identity.provider, identity.instance_id, gpus
            )
            try:
                agent.run(max_ticks=max_ticks)
            finally:
                _restore_signals(previous)
                agent.buffer.close()  # what was not delivered stays in the file
            return agent
        finally:
            if host_file:
                host_file.close()
            if record_file:
                record_file.close()
            if owned:
                owned.close()


def _local_hook(settings: AgentSettings) -> LocalHook | None:
    """The self-stop's pre-stop hook: the signal if one is named, else the command."""
    if settings.pre_stop_signal is None and not settings.pre_stop_command:
        return None
    return LocalHook(kind="signal" if settings.pre_stop_signal else "command",
                     signal=settings.pre_stop_signal, timeout=settings.pre_stop_timeout,
                     on_failure=settings.pre_stop_on_failure,
                     on_timeout=settings.pre_stop_on_timeout)


def _publisher(settings: AgentSettings, identity: Identity,
               client: Any) -> Callable[[DiskBuffer], Publisher] | None:
    """None for the daemon (the agent's default Pusher); CloudWatch when asked for."""
    if settings.publish_to != "cloudwatch":
        return None
    from costguard.telemetry.cloudwatch import CloudWatchPusher

    if client is None:
        if identity.provider != "aws":
            raise ConfigError("--publish-to cloudwatch needs an EC2 instance "
                              f"(this one is {identity.provider}:{identity.instance_id})")
        region = settings.cloudwatch_region or identity.region
        if not region:
            raise ConfigError("no region for CloudWatch: pass --cloudwatch-region "
                              "(instance metadata gave no availability zone)")
        import boto3  # only in this mode: the daemon-push agent never loads it

        client = boto3.client("cloudwatch", region_name=region)
    chosen = client
    return lambda buffer: CloudWatchPusher(chosen, buffer,
                                           namespace=settings.cloudwatch_namespace)


def _stop_on_signals(agent: Agent) -> dict[int, Any]:
    """SIGTERM/SIGINT end the loop cleanly (partial minute kept, last push tried)."""

    def handler(signum: int, frame: object) -> None:
        agent.stopping = True

    previous: dict[int, Any] = {}
    try:
        for sig in (signals.SIGTERM, signals.SIGINT):
            previous[sig] = signals.signal(sig, handler)
    except ValueError:  # not the main thread: the caller stops via max_ticks
        pass
    return previous


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signals.signal(sig, handler)
