"""`costguard recommend`: underused GPU instances, why, and the cheaper fit, in dollars."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from costguard.cli_common import cli_clock
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.costs.commands import ConfigOpt
from costguard.errors import CostguardError
from costguard.plain_lines import print_data, stdout_console

if TYPE_CHECKING:
    from costguard.config import Settings
    from costguard.recommend.settings import RecommendSettings

console = stdout_console()


def recommend_command(
    config: ConfigOpt = None,
    window: Annotated[str | None, typer.Option(
        help="Readings judged, back from now (default: recommend.window, 7d).")] = None,
    by: Annotated[Literal["instance", "team", "pod"], typer.Option(
        help="instance: each underused instance with its evidence and fit; pod: each "
        "underused GPU pod of the Kubernetes clusters; team: underused spend and savings "
        "per team (of pods with --cluster).")] = "instance",
    cluster: Annotated[str | None, typer.Option(
        help="Judge this Kubernetes cluster's GPU pods (kubernetes.clusters), read from its "
        "Prometheus; --by pod judges every cluster's.")] = None,
    filters: Annotated[list[str] | None, typer.Option(
        "--filter", metavar="DIM=VALUE", help="Only these instances, as in `report` "
        "(e.g. team=research; repeatable).")] = None,
    architectures: Annotated[Literal["same", "same-or-newer", "any"] | None, typer.Option(
        help="GPU architectures a fit may move to (default: recommend.architectures, "
        "same).")] = None,
    everything: Annotated[bool, typer.Option(
        "--all", help="Every GPU instance judged, not only the underused.")] = False,
    fmt: Annotated[Literal["table", "json", "csv"], typer.Option("--format")] = "table",
    fresh: Annotated[bool, typer.Option(
        "--fresh", help="Judge every instance's readings now, not the verdicts the daemon "
        "stored within recommend.refresh (a day).")] = False,
) -> None:
    """GPUs that do a little: each underused instance's bottleneck with its evidence, the
    cheapest type that holds what it was measured to use, the dollars, and the risks.

    Judged over the window's readings (agent or cloud metrics); an instance with too few
    readings is not judged. It never acts (docs/recommend.md).

    With --by pod or --cluster, each GPU pod of the Kubernetes clusters instead: GPUs
    used of those it requests, bottleneck (its CPU against its request), and what
    requesting only the GPUs used saves (docs/kubernetes.md).

    Example: costguard recommend --by team; costguard recommend --filter team=research;
    costguard recommend --by pod --cluster ml-prod
    """
    from costguard.policy.base import duration_arg
    from costguard.recommend import render
    from costguard.recommend.run import recommend
    from costguard.report.run import catalog_for, parse_filters
    from costguard.store.db import Database

    settings = _settings(config)
    cfg = settings.recommend
    if window is not None:
        try:
            cfg = cfg.model_copy(update={"window": duration_arg(window)})
        except ValueError as exc:
            raise _fail(CostguardError(f"bad --window {window!r}: {exc}")) from None
    if by == "pod" or cluster is not None:
        _pods(settings, cfg, cluster, filters, by, everything, fmt)
        return
    try:
        if architectures is not None:
            cfg = cfg.model_copy(update={"architectures": architectures})
        wanted = parse_filters(filters)
        db = Database(settings.database_url, create=False)  # it only reads
        try:
            with db.session() as s:
                catalog = catalog_for(settings, s)  # with the prices `prices refresh` stored
                recs = recommend(s, cli_clock().now(), catalog.quote, cfg, wanted,
                                 fresh=fresh)
        finally:
            db.dispose()
    except CostguardError as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print_data(render.to_json(recs, cfg, everything))
    elif fmt == "csv":
        print_data(render.to_team_csv(recs) if by == "team"
                   else render.to_csv(recs, everything), end="")
    elif by == "team":
        render.print_teams(console, recs)
    else:
        render.print_text(console, recs, everything)


def _pods(settings: Settings, cfg: RecommendSettings, cluster: str | None,
          filters: list[str] | None, by: str, everything: bool, fmt: str) -> None:
    """`recommend --by pod | --cluster X`: the clusters' GPU pods over the window."""
    from costguard.k8s import recommend as kube
    from costguard.k8s.allocate import DIMENSIONS
    from costguard.report.run import parse_filters, read_clusters

    try:
        clusters = settings.kubernetes.cluster(cluster)
        if not clusters:
            raise CostguardError("no Kubernetes cluster is configured: add one under "
                                 "kubernetes.clusters in costguard.yaml (docs/kubernetes.md)")
        wanted = parse_filters(filters, DIMENSIONS)
        end = cli_clock().now()
        report = read_clusters(settings, clusters, ("pod",), end - cfg.window, end, wanted)
        recs = kube.pod_recommendations(report, cfg)
    except CostguardError as exc:
        raise _fail(exc) from None
    kube.render(recs, cfg, fmt, by, everything, console)
