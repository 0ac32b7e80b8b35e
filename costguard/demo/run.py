"""`costguard demo`: the daemon's cycles over a simulated 48 hours, in well under a minute.

The simulated cloud is seeded and follows a manual clock that ends on the current whole hour,
so what the demo writes is "the last two days" for `costguard report`. It writes into a
database of its own (`./costguard-demo.db` unless `costguard --database` names another), which
it empties first, and refuses one that holds anything a demo did not write: simulated spend
never lands beside real spend. The fleet's working week is shifted so that the demo always
starts at the same hour of it, so a seed tells the same story whatever the day and hour.
The example policies run enforced against the simulated fleet (they are dry-run by default
everywhere else), so the demo shows warnings, stops and their effect on spend.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from rich.console import Console
from sqlalchemy import delete
from sqlmodel import Session, SQLModel, col, select

from costguard.clock import ManualClock, SystemClock
from costguard.config import Settings
from costguard.demo.sim import SimProvider
from costguard.demo.sim_cluster import CLUSTER, SimCluster, cluster_settings
from costguard.demo.sim_settings import SimSettings
from costguard.engine import Engine
from costguard.engine.maintain import prune_store
from costguard.errors import StoreError
from costguard.k8s.provider import KubernetesProvider
from costguard.k8s.settings import KubernetesSettings
from costguard.model import HOURS_PER_MONTH, owner_words
from costguard.policy.load import load_policy_set
from costguard.policy.schema import PolicySet
from costguard.providers.base import Provider
from costguard.report.render import to_table, usd_micros
from costguard.report.run import spend_report
from costguard.standing.report import paid_not_running
from costguard.standing.reservations import ReservationLine, unused_in
from costguard.store import control
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database, load_all_tables, sqlite_file
from costguard.store.tables import ActionJournalRow, AlertRow, CycleRow, InstanceRow

KIND_STYLE = {
    "idle-warning": ("[yellow]warn[/]", "yellow"),
    "action": ("[red]STOP[/]", "red"),
    "cleared": ("[green]busy[/]", "green"),
    "finding": ("[cyan]note[/]", "cyan"),
    "cap": ("[magenta]CAP[/]", "magenta"),
    "replaced": ("[magenta]REPLACED[/]", "magenta"),
    "gap": ("[magenta]gap[/]", "magenta"),
    "terminate-warning": ("[red]term?[/]", "red"),
    "delete-warning": ("[yellow]del?[/]", "yellow"),
    "deleted": ("[red]DELETE[/]", "red"),
}


@dataclass
class DemoResult:
    cycles: int
    seconds: float
    alerts: Counter[str] = field(default_factory=Counter)
    held: int = 0  # the most idle instances whose stop a cycle held back (idle-but-busy)


def enforced(policies: PolicySet) -> PolicySet:
    """The same policies with `mode: enforce` (only ever applied to the simulated cloud)."""
    return policies.model_copy(update={"policies": tuple(
        p.model_copy(update={"mode": "enforce"}) for p in policies.policies)})


PRUNE_EVERY = timedelta(hours=1)  # daemon.prune_interval's default
DEMO_DATABASE = "costguard-demo.db"
DEMO_POLICIES = "demo:policies"  # control key: the policy paths it ran (enforced), as JSON
# the hour of the simulated fleet's week every demo starts at (Monday 06:00 of its week)
DEMO_WEEK_HOUR = 6


def claim_demo_database(db: Database, now: datetime) -> None:
    """Empty a database for the demo; refuse one that holds data a demo did not write.

    A database is the demo's when it is empty (new) or carries the demo's mark. Everything
    in it is cleared (cycles, watermarks and anomalies too), so every run starts from the
    same place and a seed gives the same story.
    """
    with db.session() as s:
        mine = control.get(s, control.DEMO_MARK) is not None
        if not mine and any(s.exec(select(t).limit(1)).first() is not None
                            for t in (InstanceRow, BillingCostRow, CycleRow)):
            raise StoreError(
                f"{db.safe_url} holds data that no demo wrote: the demo writes simulated "
                f"spend only into a database of its own (default ./{DEMO_DATABASE}); "
                "name an empty one with `costguard --database PATH demo`")
    load_all_tables()  # the alert deliveries too: every table, children first
    with db.session() as s:
        for table in reversed(SQLModel.metadata.sorted_tables):
            s.execute(delete(table))
        control.put(s, control.DEMO_MARK, "costguard demo", now)


def demo_policies(s: Session) -> PolicySet | None:
    """The policies a demo database was written with, enforced as the demo ran them (None:
    not a demo's database, or its policy files are gone)."""
    raw = control.get(s, DEMO_POLICIES) if control.get(s, control.DEMO_MARK) else None
    if raw is None:
        return None
    paths = [Path(p) for p in json.loads(raw)]
    if not all(p.exists() for p in paths):
        return None
    return enforced(load_policy_set(paths))


def database_option(db: Database) -> str:
    """How to name `db` to `costguard --database` again: a SQLite file by its path."""
    path = sqlite_file(db.url)
    return str(path) if path is not None else db.safe_url


def week_shift(start: datetime) -> int:
    """Hours to shift the simulated fleet's week by so that `start` is its DEMO_WEEK_HOUR."""
    hour_of_week = start.weekday() * 24 + start.hour
    return (DEMO_WEEK_HOUR - hour_of_week) % (7 * 24)


def demo_policy_paths(settings: Settings) -> list[Path]:
    """The configured policies; the examples shipped in the package when the configuration
    names none that exist and keeps the default (`policies`), e.g. a `pip install` run
    outside a checkout (`costguard init` writes them out to edit)."""
    from costguard.starter import packaged_policies

    paths = list(settings.policy_paths)
    if paths == [Path("policies")] and not paths[0].exists():
        return [packaged_policies()]
    return paths


def demo_clock(now: datetime, hours: int) -> ManualClock:
    """The demo's clock: `hours` before `now`'s whole hour, so its last cycle is that hour."""
    return ManualClock(now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours))


def run_demo(
    settings: Settings, console: Console, *, hours: int = 48,
    poll: timedelta = timedelta(minutes=10), policy_paths: list[Path] | None = None,
    providers: dict[str, Provider] | None = None, verbose: bool = True,
    clock: ManualClock | None = None,
) -> DemoResult:
    if clock is None:
        clock = demo_clock(SystemClock().now(), hours)  # the CLI passes its own clock
    end = clock.now() + timedelta(hours=hours)
    policy_paths = policy_paths or demo_policy_paths(settings)
    policies = enforced(load_policy_set(policy_paths))
    db = Database(settings.database_url)
    claim_demo_database(db, clock.now())
    with db.session() as s:  # `costguard explain` judges the demo's instances by these
        control.put(s, DEMO_POLICIES, json.dumps([str(p.resolve()) for p in policy_paths]),
                    clock.now())
    if providers is None:
        sim_settings = (settings.providers.sim or SimSettings()).model_copy(update={
            "managed_groups": True,  # an ASG and a node pool beside the pets
            "underused_hosts": True,  # what `costguard recommend` shows
            "work_in_progress_hosts": True,  # idle GPUs, a busy host: never stopped
            "accelerator_hosts": True,  # an idle TPU v5e node and an idle Trainium instance
            "notebook_hosts": True,  # a managed notebook left idle, one in use
            "standing": True,  # volumes, snapshots, an address billed while nothing runs
            "week_shift_hours": week_shift(clock.now())})
        providers = {"sim": SimProvider(sim_settings, clock)}
        clusters = {CLUSTER: SimCluster(clock, clock.now())}
        providers["k8s"] = KubernetesProvider(
            KubernetesSettings(clusters=[cluster_settings()]), clock, sources=clusters)
    else:
        clusters = {}
    result = DemoResult(cycles=0, seconds=0.0)

    def show(kind: str, subject: str, body: str) -> None:
        result.alerts[kind] += 1
        if verbose and kind in KIND_STYLE:
            tag, _ = KIND_STYLE[kind]
            console.print(f"[dim]{clock.now():%a %H:%M}[/] {tag} {subject}", highlight=False)

    console.print(f"[bold]costguard demo[/]: {len(policies.policies)} policies from "
                  f"{', '.join(str(p) for p in policy_paths)}, "
                  f"enforced against a simulated fleet ({', '.join(providers)}), "
                  f"{hours} h in {int(poll.total_seconds() // 60)}-minute cycles.")
    console.print(f"database: {db.safe_url}\n")
    engine = Engine(settings, db, providers, policies, clock, alert_printer=show)
    t0 = time.perf_counter()
    pruned = clock.now()
    while clock.now() <= end:
        summary = engine.run_cycle()
        result.held = max(result.held, sum(summary.held_back.values()))
        result.cycles += 1
        if clock.now() - pruned >= PRUNE_EVERY:  # as the daemon's prune job: hourly
            pruned = clock.now()
            prune_store(engine, settings, pruned)
        clock.advance(poll)
    result.seconds = time.perf_counter() - t0
    _epilogue(console, db, settings, end - timedelta(hours=hours), end, result, list(providers),
              clusters)
    db.dispose()
    return result


def standing_summary(db: Database, since: datetime, until: datetime) -> list[str]:
    """What the demo did to volumes, snapshots and addresses, what still bills, and the
    capacity reservations' unused part."""
    with db.session() as s:
        done = list(s.exec(select(ActionJournalRow).where(
            col(ActionJournalRow.action) == "delete", ActionJournalRow.status == "done",
            col(ActionJournalRow.dry_run).is_(False))))
        left = paid_not_running(s, until)
        reserved = unused_in(s, since, until)
        told = {a.instance_id for a in s.exec(select(AlertRow).where(
            AlertRow.kind == "finding", col(AlertRow.instance_id).in_(
                [r.resource_id for r in reserved])))}
    out = [reservation_words(r, r.resource_id in told) for r in reserved
           if r.unused_instance_hours]
    if not done and not left:
        return out
    if done:
        saved = sum(j.usd_per_hour for j in done) * HOURS_PER_MONTH
        said = [f"{j.instance_id} {j.detail}" for j in done]
        out.append(f"Storage left behind: {'; '.join(said)} (${saved:,.2f}/month no longer "
                   "billed).")
    if left:
        kinds = Counter[str]()
        for line in left:
            kinds[line.kind] += line.count
        what = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(kinds.items()))
        out.append(f"Still paid for, not running: ${sum(x.usd_per_month for x in left):,.2f}"
                   f"/month in {what} (costguard report lists them by team).")
    return out


def reservation_words(r: ReservationLine, told: bool) -> str:
    """`Capacity reservation cr-1: 2 of 4 p4d.24xlarge ran nothing ...` for the epilogue."""
    cost = "unpriced" if r.usd is None else f"${r.usd:,.2f}"
    twins = (f"; {', '.join(r.now.twins)} ran on demand beside it and could have run in it"
             if r.now.twins else "")
    return (f"Capacity reservation {r.resource_id}: {r.now.unused} of {r.now.capacity} "
            f"{r.now.instance_type} ran nothing ({r.unused_accelerator_hours:,.0f} "
            f"accelerator-hours unused, {cost}){twins}; "
            + ("its owner was told" if told else "no policy told its owner")
            + " (costguard never cancels a reservation).")


def _epilogue(console: Console, db: Database, settings: Settings, since: datetime,
              until: datetime, result: DemoResult, providers: list[str],
              clusters: dict[str, SimCluster]) -> None:
    with db.session() as s:
        by_team = spend_report(s, settings, ["team"], since, until + timedelta(seconds=1))
        instances = [p for p in providers if p != "k8s"]  # workloads: _cluster_epilogue
        journal = list(s.exec(select(ActionJournalRow).where(
            col(ActionJournalRow.provider).in_(instances), ActionJournalRow.action == "stop",
            ActionJournalRow.status == "done")))
        managed = managed_summary(s, providers) + notebook_summary(s, journal)
    saved = sum(j.usd_per_hour for j in journal)
    console.print()
    console.print(f"[bold]{result.cycles} cycles in {result.seconds:.1f} s[/]: "
                  f"{result.alerts['idle-warning']} idle warnings, "
                  f"{len(journal)} instances stopped "
                  f"(${saved:,.2f}/h no longer burning), "
                  f"{result.alerts['cleared']} warnings cancelled because the GPU got busy, "
                  f"{result.alerts['finding']} notices (spot candidates, missing tags).")
    if result.held:
        many = result.held > 1
        console.print(f"Work in progress: {result.held} idle instance{'s' if many else ''} "
                      f"not stopped while {'their hosts' if many else 'its host'} showed work "
                      "(idle-but-busy: still idle spend; explain says what held it back).",
                      highlight=False)
    for line in managed:
        console.print(line, highlight=False)
    for line in standing_summary(db, since, until):
        console.print(line, highlight=False)
    unattributed = next((r for r in by_team.rows if r.key == ("unattributed",)), None)
    if unattributed is not None:
        console.print("Spend nobody answers for (no team): "
                      f"{usd_micros(unattributed.cost_micros)} of "
                      f"{usd_micros(by_team.total.cost_micros)}.")
    console.print()
    to_table(by_team, console)
    if clusters:
        _cluster_epilogue(console, db, settings, since, until, clusters)
    again = f"costguard --database {database_option(db)}"
    console.print(f"\nNext: [bold]{again} report --by team --since 7d[/] reads the same "
                  f"database; [bold]{again} report --by team --by instance-type[/] drills in;"
                  f" [bold]{again} explain INSTANCE[/] says why one was or was not stopped;"
                  f" [bold]{again} recommend[/] names the underused GPUs and their cheaper fit;"
                  f" [bold]{again} console[/] shows it all in the browser.",
                  highlight=False)


def _cluster_epilogue(console: Console, db: Database, settings: Settings, since: datetime,
                      until: datetime, clusters: dict[str, SimCluster]) -> None:
    """What the demo's GPU cluster came to: the workloads stopped through their owners, the
    ones left alone and why, and its GPU spend by namespace."""
    from costguard.k8s import report as kube
    from costguard.report.run import catalog_for

    with db.session() as s:
        rows = list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.provider == "k8s", ActionJournalRow.action == "stop")))
        workloads = list(s.exec(select(InstanceRow).where(InstanceRow.provider == "k8s")))
    stopped = {r.instance_id: r.detail for r in rows if r.status == "done"}
    console.print()
    for w in sorted(workloads, key=lambda w: w.instance_id):
        name = w.name or w.instance_id
        if w.instance_id in stopped:
            said = stopped[w.instance_id]
        elif "costguard:protect" in (w.tags or {}):
            said = "protected (costguard.io/protect), never touched"
        else:
            said = "left alone, its GPUs at work"
        console.print(f"Kubernetes {name}: {said}.", highlight=False)
    report = kube.read_report([cluster_settings()], ["namespace"], since, until, {},
                              catalog=catalog_for(settings), inventory=[],
                              sources=dict(clusters))
    console.print()
    kube.to_table(report, console)


def notebook_summary(s: Session, stops: list[ActionJournalRow]) -> list[str]:
    """One line on the managed notebooks: which were stopped, which were left at work."""
    books = list(s.exec(select(InstanceRow).where(InstanceRow.kind == "notebook")))
    if not books:
        return []
    done = {(j.provider, j.instance_id): j for j in stops}
    said = []
    for nb in sorted(books, key=lambda b: b.name or b.instance_id):
        stop = done.get((nb.provider, nb.instance_id))
        said.append(f"{nb.name or nb.instance_id} stopped (${stop.usd_per_hour:,.2f}/h; its "
                    "storage and files kept)" if stop is not None else
                    f"{nb.name or nb.instance_id} left alone")
    return [f"Managed notebooks: {'; '.join(said)}."]


def managed_summary(s: Session, providers: list[str]) -> list[str]:
    """One line per group or node pool the demo's policies met: scaled in, or reported."""
    rows = list(s.exec(select(ActionJournalRow).where(
        col(ActionJournalRow.provider).in_(providers),
        col(ActionJournalRow.action).in_(["scale_in", "skip"]))))
    owners = {(i.provider, i.instance_id): i.owner for i in s.exec(select(InstanceRow).where(
        col(InstanceRow.provider).in_(providers), col(InstanceRow.owner).is_not(None)))}
    scaled: Counter[str] = Counter()
    saved: dict[str, float] = {}
    reported: dict[str, set[str]] = {}
    for row in rows:
        owner = owners.get((row.provider, row.instance_id))
        if not owner:
            continue
        name = f"{owner_words(owner['kind'])} {owner['name']}"
        if row.action == "scale_in" and row.status == "done":
            scaled[name] += 1
            saved[name] = saved.get(name, 0.0) + row.usd_per_hour
        elif row.action == "skip" and "|managed|" in row.key:
            reported.setdefault(name, set()).add(row.instance_id)
    lines = [f"Managed fleets: {name} scaled in by {n} idle members "
             f"(${saved[name]:,.2f}/h), never below its minimum."
             for name, n in sorted(scaled.items())]
    lines += [f"Managed fleets: {name}: {len(ids)} idle nodes reported to their owners, not "
              f"stopped (the cluster's autoscaler drains nodes)." if name.startswith(
                  ("gke", "eks", "karpenter")) else
              f"Managed fleets: {name}: idle, reported, not stopped (a slice is stopped "
              f"whole or not at all)." if name.startswith(owner_words("tpu-slice")) else
              f"Managed fleets: {name}: {len(ids)} idle members left to their controller."
              for name, ids in sorted(reported.items())]
    return lines
