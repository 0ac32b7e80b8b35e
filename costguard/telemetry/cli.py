"""`costguard agent ...`: the GPU agent, and record/replay of NVML traces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import typer

from costguard.cli_compat import mend_typer
from costguard.errors import CostguardError
from costguard.small_files import SECRET_BYTES, read_small_text

mend_typer()
agent_app = typer.Typer(
    help="The GPU agent for GPU hosts: samples NVML once a second and pushes per-minute "
    "summaries to the daemon.\n\n"
    "Example: COSTGUARD_AGENT_TOKEN=... costguard agent --url http://costguard:8787",
    invoke_without_command=True,
)


# the agent's options, by concern (each panel sizes its columns to its own options)
_BUFFER = "While the daemon is down"
_IDLE = "Idle, and standalone self-stop"
_CLOUDWATCH = "With --publish-to cloudwatch"
_HOST = "Host metrics and activity"
_HOOKS = "Pre-stop hooks"


def _fail(message: object) -> typer.Exit:
    """The shared `error: MESSAGE` report, imported only on failure: costguard.cli_common
    loads the settings (every provider, boto3), ~30 MB the agent-only entry point must not
    carry (agent-overhead in BENCHMARKS.md)."""
    from costguard.cli_common import fail

    return fail(message)


def _percent(value: float, option: str) -> float:
    """A threshold in percent: NaN, infinity or a figure past 100 would make every GPU idle
    (or none), and the agent's self-stop acts on it."""
    if not 0 <= value <= 100:  # NaN fails it too
        raise _fail(f"{option} {value}: a percentage from 0 to 100, e.g. 5")
    return value


@agent_app.callback()
def agent(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="The daemon's base URL.")] = None,
    token_file: Annotated[Path | None, typer.Option(
        help="File holding the bearer token (else $COSTGUARD_AGENT_TOKEN; never a flag, "
        "so it stays out of `ps`).")] = None,
    buffer: Annotated[Path, typer.Option(
        rich_help_panel=_BUFFER, help="On-disk buffer while the daemon is down.")] = Path(
        "/var/lib/costguard-agent/buffer.sqlite3"),
    buffer_max_records: Annotated[int, typer.Option(
        rich_help_panel=_BUFFER,
        help="Summaries kept; past it the oldest are dropped, and counted.")] = 100_000,
    buffer_max_mb: Annotated[int, typer.Option(
        rich_help_panel=_BUFFER, help="The buffer's size limit, as the record limit.")] = 64,
    provider: Annotated[str | None, typer.Option(help="aws|gcp (skips metadata lookup).")] = None,
    instance_id: Annotated[str | None, typer.Option(help="Override the instance id.")] = None,
    interval: Annotated[str, typer.Option(help="Sampling period.")] = "1s",
    accelerator: Annotated[Literal["auto", "nvidia", "neuron"], typer.Option(
        metavar="<auto|nvidia|neuron>",
        help="The devices read: nvidia (NVML), neuron (AWS Trainium/Inferentia, through "
        "neuron-monitor) or auto (NVML where it loads, else neuron-monitor).")] = "auto",
    record: Annotated[Path | None, typer.Option(help="Also write raw samples here.")] = None,
    self_stop_after: Annotated[str | None, typer.Option(
        rich_help_panel=_IDLE,
        help="Standalone mode: stop this VM after its GPUs sat idle this long (e.g. 30m).")
    ] = None,
    self_stop_grace: Annotated[str, typer.Option(
        rich_help_panel=_IDLE, help="Warning before a self-stop.")] = "5m",
    idle_below: Annotated[float, typer.Option(
        rich_help_panel=_IDLE, help="Idle threshold, percent.")] = 5.0,
    signal: Annotated[Literal["auto", "sm_active", "util_gpu"], typer.Option(
        rich_help_panel=_IDLE, metavar="<signal>",
        help="What idle is read from: sm_active (GPM SM activity), util_gpu (NVML "
        "utilization) or auto (SM activity where the GPU has GPM).")] = "auto",
    publish_to: Annotated[Literal["daemon", "cloudwatch"], typer.Option(
        metavar="<target>",
        help="daemon: POST to --url. cloudwatch: PutMetricData in the CloudWatch agent's "
        "layout, which the daemon's AWS provider reads (EC2 only; needs "
        "cloudwatch:PutMetricData).")] = "daemon",
    cloudwatch_namespace: Annotated[str, typer.Option(
        rich_help_panel=_CLOUDWATCH, help="The namespace summaries are written to.")
    ] = "CWAgent",
    cloudwatch_region: Annotated[str | None, typer.Option(
        rich_help_panel=_CLOUDWATCH, help="Else the instance's region from metadata.")] = None,
    host_metrics: Annotated[bool, typer.Option(
        rich_help_panel=_HOST,
        help="Add the host's CPU (per core, iowait) and memory from /proc to every "
        "summary: what `costguard recommend` needs to tell a starved data loader from a "
        "small batch; and the host activity that holds a stop back while work is in "
        "progress (disk, network, GPU processes, terminals, Jupyter kernels).")] = True,
    jupyter_url: Annotated[list[str] | None, typer.Option(
        rich_help_panel=_HOST, metavar="<url>",
        help="A Jupyter server on this host whose kernels' activity counts as work in "
        "progress (repeat for more; it must answer GET /api/kernels without a token). "
        "Default: http://127.0.0.1:8888.")] = None,
    record_host: Annotated[Path | None, typer.Option(
        rich_help_panel=_HOST, help="Also write raw host-activity samples here (JSON lines).")
    ] = None,
    pre_stop_command: Annotated[str | None, typer.Option(
        rich_help_panel=_HOOKS, metavar="<command>",
        help="What this host runs before a stop, when a policy's pre_stop says "
        "host_command (and before a self-stop): a shell command, e.g. a checkpoint script.")
    ] = None,
    pre_stop_signal: Annotated[Literal["SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP"] | None,
                               typer.Option(
        rich_help_panel=_HOOKS, metavar="<signal>",
        help="Before a self-stop, send this to the processes holding the GPUs (else the "
        "command above runs, if given).")] = None,
    pre_stop_timeout: Annotated[str, typer.Option(
        rich_help_panel=_HOOKS, metavar="<duration>",
        help="A self-stop's hook: time limit (or time to checkpoint).")
    ] = "5m",
    pre_stop_on_failure: Annotated[Literal["hold", "stop"], typer.Option(
        rich_help_panel=_HOOKS, metavar="<hold|stop>",
        help="A self-stop's hook failed (or timed out): hold cancels the stop.")] = "hold",
    self_stop_when_host_busy: Annotated[Literal["hold", "stop"], typer.Option(
        rich_help_panel=_IDLE, metavar="<hold|stop>",
        help="hold: never self-stop while the host shows work in progress; stop: judge on "
        "the GPUs alone.")] = "hold",
) -> None:
    """Run the GPU agent (the default when no sub-command is given)."""
    if ctx.invoked_subcommand is not None:
        return
    from costguard.telemetry.agent import AgentSettings
    from costguard.telemetry.commands import parse_duration, run_agent

    try:
        token = (_token_in(token_file) if token_file
                 else os.environ.get("COSTGUARD_AGENT_TOKEN", ""))
        settings = AgentSettings(
            url=url or os.environ.get("COSTGUARD_AGENT_URL", ""), token=token,
            buffer_path=buffer, buffer_max_records=buffer_max_records,
            buffer_max_bytes=buffer_max_mb * 2**20,
            provider=provider,  # type: ignore[arg-type]
            instance_id=instance_id, interval_s=parse_duration(interval).total_seconds(),
            record_path=record,
            self_stop_after=parse_duration(self_stop_after) if self_stop_after else None,
            self_stop_grace=parse_duration(self_stop_grace),
            idle_below=_percent(idle_below, "--idle-below"),
            signal=signal, publish_to=publish_to, cloudwatch_namespace=cloudwatch_namespace,
            cloudwatch_region=cloudwatch_region, host_metrics=host_metrics,
            record_host_path=record_host, self_stop_when_host_busy=self_stop_when_host_busy,
            pre_stop_command=pre_stop_command, pre_stop_signal=pre_stop_signal,
            pre_stop_timeout=parse_duration(pre_stop_timeout),
            pre_stop_on_failure=pre_stop_on_failure, pre_stop_on_timeout=pre_stop_on_failure,
            jupyter_urls=tuple(jupyter_url) if jupyter_url else AgentSettings.jupyter_urls,
            accelerator=accelerator,
        )
        run_agent(settings)
    except CostguardError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(exc) from None


def _token_in(path: Path) -> str:
    try:
        return read_small_text(path, SECRET_BYTES).strip()
    except OSError as exc:
        raise CostguardError(f"--token-file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CostguardError(f"--token-file {path}: not UTF-8 text (byte {exc.start}); "
                             "the agent token is printable ASCII") from None


@agent_app.command("record")
def record_cmd(
    file: Annotated[Path, typer.Argument(help="Output JSONL (the shared fixture format).")],
    duration: Annotated[str, typer.Option(help="How long to sample.")] = "4m",
    interval: Annotated[str, typer.Option(help="Sampling period.")] = "1s",
) -> None:
    """Record real NVML samples into a trace file that `replay` and the tests can read.

    Example: costguard agent record my-gpu.jsonl --duration 10m
    """
    from costguard.telemetry.commands import parse_duration, record
    from costguard.telemetry.nvml import NvmlSampler

    try:
        n = record(file, parse_duration(duration), NvmlSampler(),
                   interval_s=parse_duration(interval).total_seconds())
    except CostguardError as exc:
        raise _fail(exc) from None
    print(f"recorded {n} samples to {file}")


@agent_app.command("replay")
def replay_cmd(
    file: Annotated[Path, typer.Argument(help="A trace in the fixture format.")],
    window: Annotated[str, typer.Option(help="Classification window.")] = "30s",
    fmt: Annotated[Literal["json", "text"], typer.Option("--format")] = "json",
    signal: Annotated[Literal["auto", "sm_active", "util_gpu"], typer.Option()] = "auto",
    below: Annotated[float, typer.Option(help="Idle threshold, percent.")] = 5.0,
) -> None:
    """Classify a recorded trace window by window: one JSON object per line.

    Example: costguard agent replay h100_phases.jsonl --window 30s --format json
    """
    import sys

    from costguard.telemetry.commands import parse_duration, replay

    _percent(below, "--below")
    try:
        for line in replay(file, parse_duration(window), fmt, signal, below,
                           note=lambda text: print(text, file=sys.stderr)):
            print(line)
    except CostguardError as exc:
        raise _fail(exc) from None
