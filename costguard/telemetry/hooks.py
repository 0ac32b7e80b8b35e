"""The agent's side of pre-stop hooks: run a checkpoint before the instance is stopped.

The daemon hands a hook out in its answer to the agent's push (`{"hooks": [...]}`,
actions/prestop.py); a self-stop asks for one itself. Two kinds:

* `signal`: the signal (SIGUSR1, say, which a trainer catches to write a checkpoint) goes to
  every process holding a GPU (NVML's pids); they then get `timeout_s` to checkpoint or
  exit. Succeeded once signalled (how long they took, or that they still run, is said);
  failed when none could be signalled; skipped when no process held a GPU.
* `command`: the command this host's agent is configured with (`--pre-stop-command`; the
  daemon never sends a command line), run by `/bin/sh -c` in its own session within
  `timeout_s`: exit 0 succeeded, another exit failed (with the end of its stderr), past the
  limit its whole process group is killed and it timed out; skipped with none configured.

Each hook runs once, in a thread (sampling goes on): its id is claimed in the agent's buffer
file first, so a hook handed out again is never run twice, and one an agent died during is
reported failed at the next start, not run again. Outcomes are reported to the daemon
(`POST /v1/hooks/{id}`) until it acknowledges them.
"""

from __future__ import annotations

import logging
import os
import signal as signals
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from costguard.policy.actions import HookSignal
from costguard.telemetry.buffer import DiskBuffer

log = logging.getLogger(__name__)

SIGNALS: tuple[str, ...] = get_args(HookSignal)  # what a policy's pre_stop may send
OUTCOMES = ("succeeded", "failed", "timed_out", "skipped")  # what a hook reports
MAX_TIMEOUT_S = 6 * 3600
STDERR_TAIL = 300


@dataclass(frozen=True)
class HookSpec:
    """One hook to run, as the daemon hands it out (or the self-stop asks for it)."""

    id: str
    kind: str  # signal | command
    signal: str | None
    timeout_s: float

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> HookSpec:
        """Raises ValueError for a hook this agent will not run."""
        hook_id, kind, sig = raw.get("id"), raw.get("kind"), raw.get("signal")
        timeout = raw.get("timeout_s")
        if not isinstance(hook_id, str) or not 0 < len(hook_id) <= 64:
            raise ValueError(f"hook id {hook_id!r}")
        if kind not in ("signal", "command"):
            raise ValueError(f"hook kind {kind!r}")
        if kind == "signal" and sig not in SIGNALS:
            raise ValueError(f"signal {sig!r} (one of {', '.join(SIGNALS)})")
        if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                or not 0 < timeout <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout_s {timeout!r}")
        return cls(hook_id, kind, sig if kind == "signal" else None, float(timeout))


Outcome = tuple[str, str]  # (one of OUTCOMES, detail)


class HookRunner:
    """Runs hooks once each and keeps their outcomes in the agent's buffer file."""

    def __init__(self, buffer: DiskBuffer, *, command: str | None,
                 gpu_pids: Callable[[], set[int]],
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 kill: Callable[[int, int], None] = os.kill) -> None:
        self._buffer = buffer
        self.command = command
        self._gpu_pids = gpu_pids
        self._clock, self._sleep, self._kill = clock, sleep, kill
        self._threads: dict[str, threading.Thread] = {}
        died = buffer.hooks_interrupted("the agent stopped while this hook ran; not run again")
        if died:
            log.warning("%d pre-stop hook(s) were running when the agent last stopped: "
                        "reported as failed, not run again", died)

    def submit(self, spec: HookSpec) -> bool:
        """Start `spec` in a thread unless this agent ever took it on; True if started."""
        if not self._buffer.hook_claim(spec.id):
            return False
        log.warning("pre-stop hook %s: %s", spec.id,
                    f"sending {spec.signal} to the GPUs' processes" if spec.kind == "signal"
                    else "running the configured command")
        thread = threading.Thread(target=self._run, args=(spec,), daemon=True,
                                  name=f"pre-stop-{spec.id[:8]}")
        self._threads[spec.id] = thread
        thread.start()
        return True

    def result(self, hook_id: str) -> Outcome | None:
        """The outcome of a finished hook (None: unknown, or still running)."""
        found = self._buffer.hook_result(hook_id)
        return None if found is None or found[0] == "running" else found

    def join(self, timeout: float | None = None) -> None:
        """Wait for the running hooks (tests; shutdown)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)

    def _run(self, spec: HookSpec) -> None:
        try:
            status, detail = (self._signal(spec) if spec.kind == "signal"
                              else self._command(spec))
        except Exception as exc:  # a hook that cannot run is a failed hook, never a crash
            log.exception("pre-stop hook %s failed to run", spec.id)
            status, detail = "failed", f"could not run: {exc}"
        log.warning("pre-stop hook %s %s: %s", spec.id, status, detail)
        self._buffer.hook_finish(spec.id, status, detail)

    def _signal(self, spec: HookSpec) -> Outcome:
        assert spec.signal is not None
        # never init or the agent itself (a pid NVML names from another pid namespace could
        # read as one of them)
        pids = sorted(p for p in self._gpu_pids() if p > 1 and p != os.getpid())
        if not pids:
            return "skipped", "no process held a GPU: nothing to checkpoint"
        number = int(getattr(signals, spec.signal))
        sent, problems = [], []
        for pid in pids:
            try:
                self._kill(pid, number)
                sent.append(pid)
            except ProcessLookupError:
                continue  # exited already
            except OSError as exc:
                problems.append(f"pid {pid}: {exc.strerror or exc}")
        if not sent:
            return "failed", (f"{spec.signal} reached no process holding a GPU"
                              + (f" ({'; '.join(problems)})" if problems else ""))
        start = self._clock()
        waiting, took = set(sent), 0.0
        while waiting and took < spec.timeout_s:
            self._sleep(1.0)
            waiting = {pid for pid in waiting if _alive(pid, self._kill)}
            took = self._clock() - start
        who = f"{spec.signal} to pid{'s' if len(sent) > 1 else ''} {', '.join(map(str, sent))}"
        if problems:
            who += f" (not to {'; '.join(problems)})"
        if not waiting:
            return "succeeded", f"{who}; all exited after {took:.0f} s"
        return "succeeded", (f"{who}; {len(waiting)} still running after {took:.0f} s, the "
                             "time they had to checkpoint")

    def _command(self, spec: HookSpec) -> Outcome:
        if not self.command:
            return "skipped", "no --pre-stop-command is configured on this host"
        start = self._clock()
        proc = subprocess.Popen(["/bin/sh", "-c", self.command], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signals.SIGKILL)
            except OSError:
                proc.kill()
            proc.communicate()
            return "timed_out", f"still running after {spec.timeout_s:.0f} s: killed"
        took = self._clock() - start
        if proc.returncode == 0:
            return "succeeded", f"exit 0 after {took:.0f} s"
        tail = err.decode("utf-8", "replace").strip()[-STDERR_TAIL:]
        return "failed", (f"exit {proc.returncode} after {took:.0f} s"
                          + (f": {tail}" if tail else ""))


def _alive(pid: int, kill: Callable[[int, int], None]) -> bool:
    """Still running: signalable and not a zombie (exited, its parent not told yet)."""
    try:
        kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # there, but not ours to signal
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def report_all(buffer: DiskBuffer, post: Callable[[str, dict[str, Any]], int | None]) -> int:
    """Report finished hooks to the daemon (`post(path, body)` -> HTTP status, None when
    unreachable); a 200 or 404 (the daemon forgot it) settles one. Returns how many."""
    done = 0
    for hook_id, status, detail in buffer.hooks_to_report():
        if hook_id.startswith(SELF_STOP_PREFIX):
            buffer.hook_reported(hook_id)  # the self-stop's own: no daemon asked for it
            continue
        answer = post(f"/v1/hooks/{hook_id}", {"status": status, "detail": detail})
        if answer is None:
            break
        if answer in (200, 404):
            buffer.hook_reported(hook_id)
            done += 1
    return done


SELF_STOP_PREFIX = "self-stop-"
