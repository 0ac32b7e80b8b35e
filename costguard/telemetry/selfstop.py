"""Standalone mode (`costguard agent --self-stop-after 30m`): no daemon needed.

When the classifier has said IDLE for the whole span, the agent broadcasts a warning to
logged-in users (wall) with a deadline, re-checks at the deadline, and only then stops the
instance through an injected callable. Any GPU use before the deadline cancels the stop
(and says so). Missing minutes are never idle: the classifier returns NO_DATA for them.
The same checks as a daemon's stop apply: contradictory minutes are no data, and a host
showing work in progress (idle-but-busy) is not stopped unless `--self-stop-when-host-busy
stop` says so (docs/agent.md).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from costguard.model import GpuMinute, Verdict
from costguard.policy.actions import HostBusy
from costguard.policy.conditions import HostActivity
from costguard.telemetry.classify import SignalChoice, classify
from costguard.telemetry.hooks import SELF_STOP_PREFIX, HookRunner, HookSpec
from costguard.telemetry.identity import Identity
from costguard.telemetry.stop_evidence import stop_evidence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalHook:
    """The self-stop's pre-stop hook: a signal to the GPUs' processes, or the command the
    agent is configured with (`--pre-stop-signal` / `--pre-stop-command`)."""

    kind: str  # signal | command
    signal: str | None = None
    timeout: timedelta = timedelta(minutes=5)
    on_failure: HostBusy = "hold"
    on_timeout: HostBusy = "hold"


class SelfStop:
    def __init__(
        self,
        *,
        after: timedelta,
        gpu_count: int,
        warn: Callable[[str], None],
        stop: Callable[[], None],
        grace: timedelta = timedelta(minutes=5),
        below: float = 5.0,
        signal: SignalChoice = "auto",
        host: HostActivity | None = None,
        when_host_busy: HostBusy = "hold",
        pre_stop: LocalHook | None = None,
    ) -> None:
        if after < timedelta(minutes=1):
            raise ValueError("--self-stop-after must be at least 1 minute (e.g. 30m)")
        self.after, self.grace = after, grace
        self.gpu_count, self.below, self.signal = gpu_count, below, signal
        self._warn, self._stop = warn, stop
        # work in progress on the host holds the stop back, as a daemon's policy does
        self.host, self.when_host_busy = host or HostActivity(), when_host_busy
        # the hook run before the stop (the agent sets `hooks`, the runner, when it starts)
        self.pre_stop = pre_stop
        self.hooks: HookRunner | None = None
        self._minutes: dict[tuple[int, datetime], GpuMinute] = {}
        self.deadline: datetime | None = None
        self.stopped = False
        self.last_evidence = ""
        self._since: datetime | None = None  # first minute this agent saw

    def observe(self, minutes: Sequence[GpuMinute]) -> None:
        for m in minutes:
            self._minutes[(m.gpu_index, m.minute)] = m
            if self._since is None or m.minute < self._since:
                self._since = m.minute

    def _idle(self, now: datetime) -> bool:
        end = now.replace(second=0, microsecond=0)  # the last complete minute ends here
        start = end - self.after
        self._minutes = {k: m for k, m in self._minutes.items() if m.minute >= start}
        if self._since is None or self._since > start:
            # the classifier accepts 80% coverage; a stop needs the whole span watched
            self.last_evidence = "not yet watched for the whole span"
            return False
        # the daemon's stop checks: contradictory minutes are no data, a busy host holds
        ev = stop_evidence(
            list(self._minutes.values()),
            lambda kept: classify(kept, window_start=start, window_end=end,
                                  gpu_count=self.gpu_count, signal=self.signal,
                                  below=self.below),
            end, self.host)
        self.last_evidence = "; ".join(filter(None, [ev.verdict.evidence, ev.untrusted,
                                                     ev.host.evidence if ev.host else None]))
        if ev.idle_but_busy and self.when_host_busy == "hold":
            self.last_evidence = f"idle-but-busy: {self.last_evidence}"
            return False
        return ev.verdict.verdict is Verdict.IDLE

    def check(self, now: datetime) -> None:
        """Called every tick; cheap unless a decision is due."""
        if self.stopped:
            return
        idle = self._idle(now)
        if self.deadline is None:
            if idle:
                self.deadline = now + self.grace
                self._warn(
                    f"costguard-agent: the GPUs have been idle for {_span(self.after)} "
                    f"({self.last_evidence}). This instance will be STOPPED at "
                    f"{self.deadline:%H:%M} UTC unless a GPU is used before then."
                )
            return
        if not idle:
            self.deadline = None
            self._warn("costguard-agent: GPU activity seen; the scheduled stop is cancelled.")
            return
        if now >= self.deadline:
            said = self._hook_first()
            if said is None:
                return  # the hook runs: the stop waits for it
            if said.startswith("held"):
                self.deadline = None
                self._warn(f"costguard-agent: pre-stop hook {said[5:]}; the stop is cancelled.")
                return
            self._warn(f"costguard-agent: still idle ({self.last_evidence}){said}; "
                       "stopping now.")
            self.stopped = True
            self._stop()

    def _hook_first(self) -> str | None:
        """Run the pre-stop hook once per deadline: None while it runs, then "" (no hook),
        "; pre-stop hook <outcome>" (the stop goes on) or "held <outcome>"."""
        hook, runner = self.pre_stop, self.hooks
        if hook is None or runner is None or self.deadline is None:
            return ""
        spec = HookSpec(id=f"{SELF_STOP_PREFIX}{self.deadline:%Y%m%dT%H%M%S}", kind=hook.kind,
                        signal=hook.signal, timeout_s=hook.timeout.total_seconds())
        runner.submit(spec)  # once: a second submit of the same id does nothing
        result = runner.result(spec.id)
        if result is None:
            return None
        status, detail = result
        words = f"{status.replace('_', ' ')} ({detail})"
        if ((status == "failed" and hook.on_failure == "hold")
                or (status == "timed_out" and hook.on_timeout == "hold")):
            return f"held {words}"
        return f"; pre-stop hook {words}"


def _span(d: timedelta) -> str:
    minutes = int(d.total_seconds() // 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def wall(message: str) -> None:
    """Broadcast to every terminal; logged too, since a headless VM has no one to read it."""
    log.warning("%s", message)
    if shutil.which("wall") is None:
        return
    try:
        subprocess.run(["wall", message], check=False, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("wall failed: %s", exc)


def stop_this_instance(identity: Identity) -> Callable[[], None]:
    """The real stop: the EC2 API (instance role with ec2:StopInstances on itself), falling
    back to `shutdown -h now`, which stops an EC2 instance whose shutdown behaviour is
    `stop` (the default) and a GCE VM."""

    def stop() -> None:
        if identity.provider == "aws":
            try:
                import boto3

                ec2 = boto3.client("ec2", region_name=identity.region)
                ec2.stop_instances(InstanceIds=[identity.instance_id])
                log.warning("asked EC2 to stop %s", identity.instance_id)
                return
            except Exception as exc:  # no role, no network: the OS can still stop the VM
                log.warning("EC2 stop failed (%s); falling back to shutdown -h now", exc)
        subprocess.run(["shutdown", "-h", "now"], check=False)

    return stop
