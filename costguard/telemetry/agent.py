"""The GPU agent: sample every GPU at 1 Hz, summarize per minute, push to the daemon.

Every closed minute goes into the disk buffer first and leaves it only when the daemon has
acknowledged it, so neither an unreachable daemon nor an agent restart loses data (the
daemon's ingest is idempotent, so the rare re-send after a crash is harmless). Time and
sleep are injected: tests run hours of agent time in milliseconds.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from costguard.clock import Clock
from costguard.model import GpuMinute, ProviderName, TelemetrySource
from costguard.policy.actions import HostBusy
from costguard.telemetry.activity import (
    ActivityReader,
    ActivityRecorder,
    ActivitySample,
    minute_fields,
)
from costguard.telemetry.answers import ask
from costguard.telemetry.buffer import DiskBuffer, Pending
from costguard.telemetry.classify import SignalChoice
from costguard.telemetry.hooks import HookRunner, HookSpec, report_all
from costguard.telemetry.host import HostSample, HostSampler, host_fields
from costguard.telemetry.identity import EC2_METADATA_URL, GCE_METADATA_URL, Identity
from costguard.telemetry.ingest import INGEST_PATH
from costguard.telemetry.selfstop import SelfStop
from costguard.telemetry.summary import summarize
from costguard.telemetry.trace import NvmlSample, TraceWriter

log = logging.getLogger(__name__)


class Sampler(Protocol):
    """What the agent needs from a sampler (NvmlSampler, or a fake in tests)."""

    @property
    def device_indexes(self) -> list[int]: ...

    def sample(self) -> list[NvmlSample]: ...


class Publisher(Protocol):
    """Where buffered summaries go: the daemon (`Pusher`) or CloudWatch (CloudWatchPusher)."""

    def flush(self) -> FlushResult: ...


@dataclass(frozen=True)
class AgentSettings:
    """Everything `costguard agent` is configured with (see docs/agent.md)."""

    url: str  # the daemon, e.g. http://costguard.internal:8080
    token: str
    buffer_path: Path = Path("/var/lib/costguard-agent/buffer.sqlite3")
    provider: ProviderName | None = None  # with instance_id: skip the metadata lookup
    instance_id: str | None = None
    ec2_metadata_url: str = EC2_METADATA_URL
    gce_metadata_url: str = GCE_METADATA_URL
    interval_s: float = 1.0
    batch_size: int = 500
    buffer_max_records: int = 100_000
    buffer_max_bytes: int = 64 * 2**20
    timeout_s: float = 10.0
    retry_max_s: float = 300.0
    record_path: Path | None = None  # also write raw samples here (trace format)
    self_stop_after: timedelta | None = None  # standalone mode: stop the VM when idle this long
    self_stop_grace: timedelta = timedelta(minutes=5)
    idle_below: float = 5.0
    signal: SignalChoice = "auto"
    publish_to: Literal["daemon", "cloudwatch"] = "daemon"
    cloudwatch_namespace: str = "CWAgent"
    cloudwatch_region: str | None = None  # else the instance's own region (from metadata)
    identity_audience: str = "costguard"  # the daemon's http.identity.audience (GCE tokens)
    host_metrics: bool = True  # host CPU and memory from `proc_path` on every summary
    proc_path: Path = Path("/proc")
    # host activity (telemetry/activity.py), also under host_metrics: the Jupyter servers
    # asked for their kernels, and where raw activity samples are recorded
    jupyter_urls: tuple[str, ...] = ("http://127.0.0.1:8888",)
    record_host_path: Path | None = None
    self_stop_when_host_busy: HostBusy = "hold"
    # pre-stop hooks (telemetry/hooks.py): the command `host_command` hooks run, and the
    # self-stop's own hook (a signal, else the command, else none)
    pre_stop_command: str | None = None
    pre_stop_signal: str | None = None
    pre_stop_timeout: timedelta = timedelta(minutes=5)
    pre_stop_on_failure: HostBusy = "hold"
    pre_stop_on_timeout: HostBusy = "hold"
    # which devices it reads: NVIDIA GPUs through NVML, AWS Trainium/Inferentia through
    # neuron-monitor (telemetry/neuron.py), or auto: NVML where it loads, else neuron-monitor
    accelerator: Literal["auto", "nvidia", "neuron"] = "auto"


@dataclass
class FlushResult:
    sent: int = 0
    discarded: int = 0
    reachable: bool = True
    error: str | None = None


class Pusher:
    """Sends buffered summaries, oldest first, acknowledging each accepted batch."""

    def __init__(
        self,
        client: httpx.Client,
        url: str,
        token: str,
        buffer: DiskBuffer,
        *,
        batch_size: int = 500,
        prove: Callable[[], str | None] | None = None,
        on_hooks: Callable[[list[Any]], None] | None = None,
    ) -> None:
        self._client = client
        self._base = url.rstrip("/")
        self._endpoint = self._base + INGEST_PATH
        self._on_hooks = on_hooks  # pre-stop hooks the daemon's answer hands out
        self._token = token
        self._buffer = buffer
        self.batch_size = batch_size
        # the instance credential, when the agent proved its instance (docs/agent.md)
        self._prove = prove
        self.credential = prove() if prove is not None else None

    @property
    def _headers(self) -> dict[str, str]:
        bearer = self.credential or self._token
        return {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}

    @property
    def auth(self) -> str:
        return "instance credential" if self.credential else "shared token"

    def flush(self) -> FlushResult:
        result = FlushResult()
        size = self.batch_size
        reproved = False
        while batch := self._buffer.peek(size):
            body = '{"minutes": [' + ",".join(p.body for p in batch) + "]}"
            try:
                answer = ask(self._client, "POST", self._endpoint, content=body,
                             headers=self._headers)
            except httpx.HTTPError as exc:
                result.reachable, result.error = False, f"daemon unreachable: {exc}"
                return result
            status = answer.status
            if status == 401 and self.credential is not None and not reproved:
                # the credential expired (or the daemon's key changed): prove again, once
                reproved = True
                self.credential = self._prove() if self._prove is not None else None
                continue
            if status == 413 and len(batch) > 1:
                # whoever says it (a proxy's body limit is lower than ours too): halve; no
                # summary is dropped for it
                size = max(1, len(batch) // 2)
                continue
            if not answer.from_ingest(len(batch)):
                # not costguard's ingest answering (a proxy's 400 for plain HTTP sent to its
                # TLS port, a web server's 403 or 200): nothing was taken, nothing is
                # refused for good; keep everything and try again later
                result.reachable = False
                result.error = (f"{self._endpoint} answered {status} but not as costguard's "
                                f"ingest does: is --url the daemon? ({answer.text})")
                return result
            if status == 200:
                self._buffer.ack(batch[-1].seq)
                result.sent += len(batch)
                self._hooks_in(answer.payload)
            elif status in (400, 403, 413, 422):  # refused for good: never sent again
                refused = self._refused(batch, answer.payload)
                log.error("daemon refused %d summaries for good: %s", len(refused),
                          answer.text)
                self._buffer.discard([p.seq for p in refused])
                result.discarded += len(refused)
            else:
                # 401 (wrong token), 404 (wrong URL), 429, 503, ...: the fault is not in the
                # batch: keep everything and try again later
                result.reachable = False
                result.error = f"daemon answered {status}: {answer.text}"
                return result
        return result

    def _hooks_in(self, payload: dict[str, Any] | None) -> None:
        if self._on_hooks is None or payload is None:
            return
        hooks = payload.get("hooks")
        if isinstance(hooks, list) and hooks:
            self._on_hooks(hooks)

    def post_json(self, path: str, body: dict[str, Any]) -> int | None:
        """POST `body` to the daemon at `path`; its status, or None when unreachable."""
        try:
            return ask(self._client, "POST", self._base + path, json=body,
                       headers=self._headers).status
        except httpx.HTTPError:
            return None

    @staticmethod
    def _refused(batch: list[Pending], payload: dict[str, Any] | None) -> list[Pending]:
        """Only the item the daemon named as invalid, else the whole batch."""
        index = None if payload is None else payload.get("index")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(batch):
            return [batch[index]]
        return batch


class Agent:
    """One agent process: tick() once per interval; run() loops until told to stop."""

    def __init__(
        self,
        settings: AgentSettings,
        sampler: Sampler,
        identity: Identity,
        *,
        client: httpx.Client,
        clock: Clock,
        sleep: Callable[[float], None],
        buffer: DiskBuffer | None = None,
        recorder: TraceWriter | None = None,
        self_stop: SelfStop | None = None,
        publisher: Callable[[DiskBuffer], Publisher] | None = None,
        prove: Callable[[], str | None] | None = None,
        host: HostSampler | None = None,
        activity: ActivityReader | None = None,
        activity_recorder: ActivityRecorder | None = None,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self._host = host
        self._activity = activity
        self._activity_recorder = activity_recorder
        self._activity_pending: list[ActivitySample] = []
        self._activity_base: ActivitySample | None = None
        self._host_pending: list[HostSample] = []
        self._host_base: HostSample | None = None
        self._sampler = sampler
        self._clock = clock
        self._sleep = sleep
        self.buffer = buffer or DiskBuffer(
            settings.buffer_path,
            max_records=settings.buffer_max_records,
            max_bytes=settings.buffer_max_bytes,
        )
        self._gpu_pids: set[int] = set()  # the processes NVML saw on the GPUs last tick
        self.hooks = HookRunner(self.buffer, command=settings.pre_stop_command,
                                gpu_pids=lambda: set(self._gpu_pids))
        self.pusher: Publisher = publisher(self.buffer) if publisher else Pusher(
            client, settings.url, settings.token, self.buffer, batch_size=settings.batch_size,
            prove=prove, on_hooks=self._hooks_given,
        )
        self._recorder = recorder
        self.self_stop = self_stop
        if self_stop is not None:
            self_stop.hooks = self.hooks
        self._minute: float | None = None
        self._pending: dict[int, list[NvmlSample]] = {}
        self._retry_at: datetime | None = None
        self._retry_delay = 0.0
        self.last_flush = FlushResult()
        self.stopping = False
        # the buffer's file cannot be written (a full disk): why, and the summaries lost since
        self.unwritable: str | None = None
        self.unwritten = 0
        self._unwritten_before = 0

    def tick(self) -> None:
        """Sample, close the minute when it turns, push what is due."""
        samples = self._sampler.sample()
        if samples:
            self._gpu_pids = {p.pid for s in samples for p in (s.processes or ())}
        turning = False
        activity: ActivitySample | None = None
        if self._activity is not None and samples:
            t = samples[0].t
            turning = self._minute is not None and t - t % 60 > self._minute
            pids = {p.pid for s in samples for p in (s.processes or ())}
            activity = self._activity.sample(t, pids, minute_end=turning)
            if self._activity_recorder is not None:
                self._activity_recorder.write(activity)
            if turning:  # the closing minute's last reading, and the next one's base
                self._activity_pending.append(activity)
        for s in samples:
            if self._recorder is not None:
                self._recorder.write(s)
            minute = s.t - s.t % 60
            if self._minute is not None and minute > self._minute:
                self.close_minute()
            self._minute = minute
            self._pending.setdefault(s.gpu, []).append(s)
        if activity is not None and not turning:
            self._activity_pending.append(activity)
        if self._host is not None and (host := self._host.sample()) is not None:
            self._host_pending.append(host)
        self._maybe_flush()
        if self.self_stop is not None:
            self.self_stop.check(self._clock.now())

    def close_minute(self) -> list[GpuMinute]:
        """Summarize the open minute per GPU into the buffer (also on shutdown)."""
        if self._minute is None or not self._pending:
            return []
        start = datetime.fromtimestamp(self._minute, UTC)
        host = host_fields(self._host_base, self._host_pending)
        if self._host_pending:
            self._host_base, self._host_pending = self._host_pending[-1], []
        gpu_pids = {gpu: {p.pid for s in samples for p in (s.processes or ())}
                    for gpu, samples in self._pending.items()}
        busy, per_gpu = minute_fields(self._activity_base, self._activity_pending, gpu_pids)
        if self._activity_pending:
            self._activity_base, self._activity_pending = self._activity_pending[-1], []
        host.update(busy)
        minutes = [
            summarize(
                samples,
                provider=self.identity.provider,
                instance_id=self.identity.instance_id,
                gpu_index=gpu,
                minute=start,
                source=TelemetrySource.AGENT,
                host={**host, **per_gpu.get(gpu, {})},
            )
            for gpu, samples in sorted(self._pending.items())
        ]
        self._pending = {}
        try:
            dropped = self.buffer.append([m.model_dump_json() for m in minutes])
        except sqlite3.Error as exc:
            self._unwritable(exc, len(minutes))
            dropped = 0
        else:
            self._writable()
        if dropped:
            log.warning(
                "agent buffer full: dropped the %d oldest summaries (%d in all)",
                dropped,
                self.buffer.dropped,
            )
        if self.self_stop is not None:
            self.self_stop.observe(minutes)
        return minutes

    def _maybe_flush(self) -> None:
        now = self._clock.now()
        if self._retry_at is not None and now < self._retry_at:
            return
        try:
            self.last_flush = self.pusher.flush()
        except sqlite3.Error as exc:  # an answered batch cannot be forgotten: sent again later
            self._unwritable(exc, 0)
            self._back_off(now)
            return
        if self.last_flush.reachable:
            self._retry_at, self._retry_delay = None, 0.0
            if isinstance(self.pusher, Pusher):  # outcomes of pre-stop hooks run here
                report_all(self.buffer, self.pusher.post_json)
            return
        self._back_off(now)
        log.warning(
            "%s; %d summaries buffered, next try in %.0f s",
            self.last_flush.error,
            len(self.buffer),
            self._retry_delay,
        )

    def _back_off(self, now: datetime) -> None:
        """Exponential backoff, so a down daemon is not hammered by every agent at once."""
        self._retry_delay = min(self.settings.retry_max_s, max(1.0, self._retry_delay * 2))
        self._retry_at = now + timedelta(seconds=self._retry_delay)

    def _unwritable(self, exc: sqlite3.Error, lost: int) -> None:
        """The buffer refused a write (a full disk, a read-only or failing one): said once,
        not as a traceback every minute; what it holds is still pushed."""
        if self.unwritable is None:
            self._unwritten_before = self.unwritten
            log.error("cannot write the agent buffer %s (%s): new summaries are lost until it "
                      "can be written (those GPU-minutes read as no data, never idle); the "
                      "summaries it holds are still pushed", self.buffer.path, exc)
        self.unwritable = str(exc)
        self.unwritten += lost

    def _writable(self) -> None:
        if self.unwritable is not None:
            log.warning("the agent buffer %s is written again; %d summaries were lost "
                        "meanwhile", self.buffer.path, self.unwritten - self._unwritten_before)
            self.unwritable = None

    def _hooks_given(self, raw: list[Any]) -> None:
        """Pre-stop hooks in the daemon's answer: this instance's are run, once each."""
        mine = (self.identity.provider, self.identity.instance_id)
        for item in raw:
            if not isinstance(item, dict) or (item.get("provider"),
                                               item.get("instance_id")) != mine:
                continue
            try:
                self.hooks.submit(HookSpec.from_json(item))
            except ValueError as exc:
                log.error("pre-stop hook refused: %s", exc)

    def run(self, *, max_ticks: int | None = None) -> None:
        """Loop at `interval_s` until `stopping` is set (signal handler) or max_ticks."""
        ticks = 0
        while not self.stopping and (max_ticks is None or ticks < max_ticks):
            started = self._clock.now()
            try:
                self.tick()
            except Exception:  # a bug in one tick must not end monitoring for good
                log.exception("agent tick failed; continuing")
            ticks += 1
            if self.self_stop is not None and self.self_stop.stopped:
                break
            spent = (self._clock.now() - started).total_seconds()
            self._sleep(max(0.0, self.settings.interval_s - spent))
        self.shutdown()

    def shutdown(self) -> None:
        """Keep the partial minute and try one last push; the buffer keeps the rest."""
        self.close_minute()
        self._retry_at = None
        self._maybe_flush()

    def status(self) -> dict[str, object]:
        return {
            "instance": f"{self.identity.provider}:{self.identity.instance_id}",
            "buffered": len(self.buffer),
            "dropped": self.buffer.dropped,
            "unwritten": self.unwritten,
            "daemon_reachable": self.last_flush.reachable,
            "auth": getattr(self.pusher, "auth", "n/a"),
        }
