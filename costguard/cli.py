"""The `costguard` command line (Typer + rich)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from costguard.actions.commands import audit_command, simulate_command, snooze_command
from costguard.alerts.commands import alerts_app
from costguard.billing.commands import billing_app
from costguard.cli_common import ConfigOpt, cli_clock, err, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.cli_compat import mend_typer
from costguard.cli_demo import demo_command
from costguard.cli_run import run_command
from costguard.console.commands import console_command
from costguard.costs.commands import anomaly_app, budget_app
from costguard.costs.price_commands import prices_app
from costguard.daemon.commands import db_backup, db_compact, db_size, status
from costguard.daemon.identity_commands import identity_app
from costguard.errors import CostguardError
from costguard.plain_lines import stdout_console
from costguard.recommend.commands import recommend_command
from costguard.telemetry.cli import agent_app

if TYPE_CHECKING:
    pass

mend_typer()
app = typer.Typer(
    name="costguard",
    help="Cloud cost governance for GPU and ML compute.\n\n"
    "Example: costguard demo   (48 simulated hours in seconds, then spend by team)",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
db_app = typer.Typer(help="Database schema and maintenance.\n\nExample: costguard db upgrade",
                     no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(agent_app, name="agent")
app.add_typer(alerts_app, name="alerts")
app.add_typer(billing_app, name="billing")
app.add_typer(prices_app, name="prices")
app.add_typer(anomaly_app, name="anomaly")
app.add_typer(budget_app, name="budget")
app.add_typer(identity_app, name="identity")
app.command("snooze")(snooze_command)
app.command("audit")(audit_command)
app.command("simulate")(simulate_command)
app.command("recommend")(recommend_command)
app.command("console")(console_command)
app.command("status")(status)
app.command("demo")(demo_command)
app.command("run")(run_command)
db_app.command("backup")(db_backup)
db_app.command("compact")(db_compact)
db_app.command("size")(db_size)

console = stdout_console()


def _show_version(value: bool) -> None:
    if value:
        from costguard import __version__

        print(f"costguard {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each stage.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True,
        help="Print the version and exit.")] = False,
    database: Annotated[str | None, typer.Option(
        "--database", metavar="URL|PATH",
        help="Use this store instead of the configured one: a database URL, or a SQLite "
        "file's path (e.g. costguard-demo.db).")] = None,
) -> None:
    import costguard.cli_common as common

    common.DATABASE = common.database_url(database) if database else None
    from costguard.daemon.logs import RedactingFormatter, StderrHandler, TextFormatter, install

    # every command's log lines (and every library's) go through costguard's redaction
    handler = StderrHandler()
    handler.setFormatter(RedactingFormatter(TextFormatter()))
    install(handler, logging.DEBUG if verbose else logging.WARNING)


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to write them (default: here).")]
    = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
) -> None:
    """Write a commented costguard.yaml and the example policies to start from.

    Example: costguard init ./costguard && cd costguard && costguard demo
    """
    from costguard.starter import write_starter

    try:
        written = write_starter(directory, force=force)
    except CostguardError as exc:
        raise _fail(exc) from None
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    here = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory} && "
    console.print(f"Next: {here}costguard validate && costguard demo", highlight=False)


@app.command()
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Policy files or directories. None: costguard.yaml (or --config) and the COSTGUARD_* "
             "variables, the policies it names, its routing and price override files.",
        show_default=False)] = None,
    config: ConfigOpt = None,
    fmt: Annotated[Literal["text", "json"], typer.Option(
        "--format", help="text, or JSON: {ok, problems, warnings, policies, ...}.")] = "text",
) -> None:
    """Check policy files, or the whole configuration; print every problem as
    FILE:LINE:COL: message.

    Example: costguard validate   (all that `costguard run` will read)

    Example: costguard validate policies/ --format json

    Exit status 0 when all is valid, 2 otherwise.
    """
    from costguard.setup_check import check_policies, check_setup

    check = check_policies(paths) if paths else check_setup(config)
    if fmt == "json":
        print(json.dumps(check.as_json(whole=not paths), indent=2))
    else:
        for line in check.lines():
            err.print(line, highlight=False, markup=False, soft_wrap=True)
        if check.ok:
            console.print(check.summary(whole=not paths), highlight=False)
            console.print(f"governing {check.kinds()} (resource kinds: docs/policies.md)",
                          highlight=False)
        else:
            err.print(f"{len(check.problems) + len(check.others)} problem(s) found", style="red")
    if not check.ok:
        raise typer.Exit(2)


@app.command()
def report(
    config: ConfigOpt = None,
    by: Annotated[list[str], typer.Option(
        "--by", help="team, project, env, cost-center, account, provider, region, "
        "instance-type, lifecycle, instance, accelerator (GPU, TPU, Trainium, Inferentia), "
        "owner, owner-kind, managed, kind (instance, notebook) (repeat to nest); "
        "for Kubernetes pods: cluster, namespace, workload, pod, node, team.")
    ] = ["team"],  # noqa: B006
    since: Annotated[str, typer.Option(help="A duration back from now (7d) or a date.")] = "7d",
    until: Annotated[str | None, typer.Option(help="End (default now): duration or date.")] = None,
    filters: Annotated[list[str], typer.Option(
        "--filter", help="DIMENSION=VALUE, e.g. team=research.")] = [],  # noqa: B006
    fmt: Annotated[Literal["table", "csv", "json", "html"], typer.Option(
        "--format", help="table, csv, json (stable, see docs/report.md) or html (charts).")
    ] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to FILE.")] = None,
    compare: Annotated[Literal["billed"] | None, typer.Option(
        help="`billed`: imported bills beside the estimate, and the gap.")] = None,
    cluster: Annotated[str | None, typer.Option(
        help="A Kubernetes cluster's pods (kubernetes.clusters); --by namespace, workload, "
        "pod or node reads every cluster.")] = None,
) -> None:
    """Spend by team (or any dimension), and how much of it was idle.

    Example: costguard report --by team --since 7d --format html --output spend.html
    Kubernetes: costguard report --by namespace --by workload --since 24h
    """
    from costguard.report.run import render_report

    settings = _settings(config)
    try:
        render_report(settings, by, since, until, filters, fmt, output, compare=compare,
                      now=cli_clock().now(), console=console, cluster=cluster)
    except CostguardError as exc:
        raise _fail(exc) from None
    if output is not None:
        console.print(f"wrote {output}")


@app.command()
def explain(
    instance: Annotated[str, typer.Argument(
        help="Instance id (i-0abc..., a GCE name) or name; or a volume, snapshot, address or "
             "reservation id.")],
    config: ConfigOpt = None,
    at: Annotated[str | None, typer.Option(
        help="As of this time: a duration back (2h) or a date (default: the last cycle).")
    ] = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", help="text or json.")
                   ] = "text",
) -> None:
    """Why costguard did, or did not, act on one instance (or volume, snapshot, address,
    reservation): every policy's filters and condition, protection, snooze, owner, mode,
    and the journal.

    Example: costguard explain i-0abc123 (or: costguard --database costguard-demo.db explain
    research-p4d-22)
    """
    from costguard.demo.run import demo_policies
    from costguard.report.explain import Explanation, UnknownInstance
    from costguard.report.explain import explain as explain_instance
    from costguard.report.run import catalog_for, parse_when
    from costguard.standing.explain import StandingExplanation
    from costguard.standing.explain import explain as explain_standing
    from costguard.store.db import Database

    settings = _settings(config)
    now = cli_clock().now()
    try:
        when = parse_when(at, now, "--at") if at else None
        db = Database(settings.database_url, create=False)  # it only reads
        try:
            with db.session() as s:
                # a demo's database: judged by the policies the demo ran, as it ran them
                ran = demo_policies(s)
                policies = ran or load_policies_or_exit(settings.policy_paths)
                answer: Explanation | StandingExplanation | None
                try:
                    answer = explain_instance(
                        s, instance, policies, catalog_for(settings), now, at=when,
                        recommend=settings.recommend, demo=ran is not None)
                except UnknownInstance:  # a volume, snapshot, address or reservation?
                    answer = explain_standing(s, instance, policies, now,
                                              demo=ran is not None)
                    if answer is None:
                        raise
        finally:
            db.dispose()
    except CostguardError as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print(json.dumps(answer.as_json(), indent=2))
        return
    for line in answer.lines():  # not wrapped: a long evidence line stays one line
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command()
def iam(
    config: ConfigOpt = None,
    provider: Annotated[Literal["aws", "gcp", "k8s"], typer.Option(
        help="Which cloud, or k8s: the ClusterRole for the Kubernetes clusters.")] = "aws",
    enforce: Annotated[bool | None, typer.Option(
        "--enforce/--read-only",
        help="Default: decided by the loaded policies (read-only unless one enforces).")] = None,
    fmt: Annotated[Literal["text", "json"], typer.Option(
        "--format", help="text (AWS: the policy JSON, GCP: the role YAML) or json (both).",
    )] = "text",
) -> None:
    """Print the least-privilege IAM policy (AWS JSON), custom role (GCP YAML) or
    Kubernetes ClusterRole (k8s YAML) needed.

    Example: costguard iam --provider aws > costguard-policy.json
    """
    settings = _settings(config)
    policies = load_policies_or_exit(settings.policy_paths).policies
    # volumes, snapshots, addresses, reservations, notebooks: each kind governed here, with
    # what enforced policies do
    from costguard.policy.kinds import KINDS

    standing: dict[str, frozenset[str]] = {}
    for p in policies:
        if KINDS[p.resource].own_rights and provider in p.providers:
            enforced = p.is_enforced if enforce is None else enforce
            acts = frozenset(str(a.kind) for a in p.actions) & {"delete", "tag", "stop",
                                                                "start"}
            standing[p.resource] = standing.get(p.resource, frozenset()) | (
                acts if enforced else frozenset())
    governs = "workload" if provider == "k8s" else "instance"
    policies = tuple(p for p in policies if p.resource == governs)
    acting = [p for p in policies if p.is_enforced
              and (p.stop_action or p.tag_action or p.scale_in_action
                   or p.scale_to_zero_action)]
    enforcing = bool(acting) if enforce is None else enforce
    tagging = any(p.tag_action for p in acting) or (enforce is True)
    # snapshot + terminate rights only where an enforced policy has a `terminate` step
    terminating = enforcing and any(p.is_enforced and p.terminate_action for p in policies)
    # scale-in rights only where an enforced policy has a `scale_in` step
    scaling_in = enforcing and any(p.is_enforced and p.scale_in_action for p in policies)
    parking = enforcing and any(p.is_enforced and p.scale_to_zero_action for p in policies)
    if provider == "k8s":
        from costguard.k8s import rbac

        workloads = enforcing
        deleting = workloads and any(c.delete_bare_pods for c in settings.kubernetes.clusters)
        if fmt == "json":
            role = rbac.cluster_role("costguard", acting=workloads, deleting_pods=deleting)
            print(json.dumps(role, indent=2))
        else:
            print(rbac.render_cluster_role(acting=workloads, deleting_pods=deleting), end="")
        return
    if provider == "aws":
        from costguard.providers.aws import required_iam_policy

        print(json.dumps(required_iam_policy(enforcing, tagging, terminating=terminating,
                                             scaling_in=scaling_in, parking=parking,
                                             standing=standing),
                         indent=2))
    else:
        from costguard.providers.gcp import render_role, role_definition

        # parking a MIG (resize) needs the same rights as a scale-in (deleteInstances)
        gcp = settings.providers.gcp
        rights = {"terminating": terminating, "scaling_in": scaling_in or parking,
                  "tpus": gcp is None or gcp.tpus, "standing": standing}
        if fmt == "json":  # gcloud iam roles create --file reads JSON as well as YAML
            print(json.dumps(role_definition(enforcing, **rights), indent=2))
        else:
            print(render_role(enforcing, **rights), end="")


@app.command()
def pause(config: ConfigOpt = None) -> None:
    """Kill switch: stop all actions (findings and reports go on) until `costguard resume`.

    Example: costguard pause
    """
    _set_paused(config, True)
    console.print("paused: costguard takes no action until `costguard resume`")


@app.command()
def resume(config: ConfigOpt = None) -> None:
    """Lift the kill switch set by `costguard pause`.

    Example: costguard resume
    """
    _set_paused(config, False)
    console.print("resumed: policies in enforce mode act again")


def _set_paused(config: Path | None, paused: bool) -> None:
    from costguard.store import control
    from costguard.store.db import Database

    settings = _settings(config)
    db = Database(settings.database_url)
    with db.session() as s:
        control.put(s, control.PAUSED, "true" if paused else "false", cli_clock().now())


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Create or migrate the database schema to the latest version.

    Example: COSTGUARD_DATABASE_URL=postgresql://user@host/costguard costguard db upgrade
    """
    from costguard.store.db import current_revision, make_engine, upgrade

    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        upgrade(engine)
    except CostguardError as exc:
        raise _fail(exc) from None
    console.print(f"database at revision {current_revision(engine)} "
                  f"({engine.url.render_as_string(hide_password=True)})")


# `costguard --help` lists the first hour first: start, try, check, run, read, then the rest
_ORDER = ["init", "demo", "validate", "run", "report", "explain", "recommend", "status",
          "snooze", "audit", "simulate", "iam", "pause", "resume"]


def _rank(info: typer.models.CommandInfo) -> int:
    name = info.name or (info.callback.__name__ if info.callback else "")
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


app.registered_commands.sort(key=_rank)


def main() -> None:  # pragma: no cover - console script entry
    try:
        app()
    except CostguardError as exc:
        _fail(exc)
        sys.exit(2)


