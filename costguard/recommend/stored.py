"""Efficiency verdicts judged once a day and stored, so that reading them is cheap.

Judging reads every reading of a week; the `underused:` condition, the underused-spend
metric and the weekly digest want the answer every cycle. The cycle calls `refresh`: it
judges the GPU instances whose verdict under a set of thresholds is missing or older than
`recommend.refresh` (at most `judge_per_cycle` and `judge_gpu_minutes_per_cycle`, the
oldest first, so a large fleet is spread over cycles) and replaces their rows. `load`
reads back the verdicts young enough to trust (judged within two refresh periods): an
instance with none is "not judged yet", never underused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from sqlalchemy import case, delete, func, tuple_
from sqlmodel import Session, col, select

from costguard.clock import utc
from costguard.model import Instance
from costguard.recommend.fit import PriceLookup
from costguard.recommend.run import gpu_minutes, judge_instances, spend_by_instance
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.tables import EfficiencyRow, judged_rows
from costguard.recommend.verdict import StoredVerdict, settings_key
from costguard.telemetry.efficiency import Efficiency

Ref = tuple[str, str]  # (provider, instance_id)
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)  # "judged" at: never
# the most due instances whose spend is read by id (one bound list; SQLite takes 32,766
# parameters): a larger `judge_per_cycle` reads the whole fleet's, as it is
_SPEND_BY_ID_MAX = 10_000


def due(session: Session, instances: Sequence[Instance], now: datetime,
        cfg: RecommendSettings) -> list[Instance]:
    """The GPU instances to judge now: no verdict, or one older than `cfg.refresh`; the
    oldest first, at most `cfg.judge_per_cycle`, and no more than
    `cfg.judge_gpu_minutes_per_cycle` GPU-minutes of the window in all (the readings an
    instance can have: its GPUs over the window, or since it was launched), the first one
    whatever its size. Judging costs a few microseconds a reading: 500 eight-GPU hosts'
    week of agent minutes was 40 million readings in one cycle."""
    key = settings_key(cfg)
    judged: dict[Ref, datetime] = {
        (p, i): utc(t) for p, i, t in session.exec(
            select(EfficiencyRow.provider, EfficiencyRow.instance_id, EfficiencyRow.judged_at)
            .where(EfficiencyRow.settings_key == key))}
    ages = [(judged.get((i.provider, i.instance_id), _NEVER), (i.provider, i.instance_id), i)
            for i in instances if i.gpu_count > 0]
    stale = sorted((t for t in ages if t[0] <= now - cfg.refresh), key=lambda t: t[:2])
    out: list[Instance] = []
    minutes = 0
    for _, _, inst in stale[:cfg.judge_per_cycle]:
        need = gpu_minutes(inst, now - cfg.window, now)
        if out and minutes + need > cfg.judge_gpu_minutes_per_cycle:
            break
        out.append(inst)
        minutes += need
    return out


def refresh(session: Session, instances: Sequence[Instance], now: datetime,
            price: PriceLookup, cfg: RecommendSettings) -> int:
    """Judge and store the instances `due` now; returns how many were judged."""
    todo = due(session, instances, now, cfg)
    key = settings_key(cfg)
    # verdicts no cycle has renewed for a whole window: instances gone or no longer GPU
    session.execute(delete(EfficiencyRow).where(
        col(EfficiencyRow.settings_key) == key,
        col(EfficiencyRow.judged_at) < now - max(cfg.window, 2 * cfg.refresh)))
    if not todo:
        return 0
    # the due instances' spend only: a fleet's whole week was read here every cycle
    ids = [i.instance_id for i in todo] if len(todo) <= _SPEND_BY_ID_MAX else None
    spent, teams = spend_by_instance(session, now - cfg.window, now, instance_ids=ids)
    judged = judge_instances(session, todo, now, price, cfg, spent, teams)
    for start in range(0, len(todo), 500):
        chunk = todo[start:start + 500]
        session.execute(delete(EfficiencyRow).where(
            col(EfficiencyRow.settings_key) == key,
            tuple_(col(EfficiencyRow.provider), col(EfficiencyRow.instance_id)).in_(
                [(i.provider, i.instance_id) for i in chunk])))
    for r in judged:
        f, e = r.fit, r.fit.efficiency
        session.add(EfficiencyRow(
            provider=f.instance.provider, instance_id=f.instance.instance_id,
            settings_key=key, judged_at=now, bottleneck=str(e.bottleneck),
            underused=e.underused, team=r.team, spend_usd=r.spend_usd,
            fit_to=f.to.instance_type if f.to else None, monthly_usd=f.monthly_usd,
            reason=f.reason, risks=list(f.risks), efficiency=e.model_dump(mode="json")))
    return len(judged)


def load(session: Session, cfg: RecommendSettings, now: datetime) -> dict[Ref, StoredVerdict]:
    """The stored verdicts under `cfg`'s thresholds judged within two refresh periods."""
    rows = judged_rows(session, settings_key(cfg), _trusted_after(cfg, now))
    return {(r.provider, r.instance_id): _verdict(r) for r in rows}


def reload(session: Session, cfg: RecommendSettings, now: datetime,
           held: Mapping[Ref, StoredVerdict]) -> dict[Ref, StoredVerdict]:
    """`load`, keeping each verdict of `held` whose row is the one it was built from (judged
    at the same time, before `now`): only the rows judged since are read whole and built.
    The daemon renews its held verdicts every cycle it judges any, and a cycle judges a
    share of the fleet: rebuilding them all (~3.6 KB and ~60 µs each) took 447 ms a cycle
    for 7,000 verdicts, 35 of them judged again since (102 ms now; a probe on SQLite)."""
    key = settings_key(cfg)
    stamps = session.execute(
        select(col(EfficiencyRow.provider), col(EfficiencyRow.instance_id),
               col(EfficiencyRow.judged_at))
        .where(col(EfficiencyRow.settings_key) == key,
               col(EfficiencyRow.judged_at) > _trusted_after(cfg, now))).all()
    kept: dict[Ref, StoredVerdict | None] = {}
    since: datetime | None = None  # the earliest judged time of a row not held as it is
    for provider, instance_id, at in stamps:
        ref, at = (provider, instance_id), utc(at)
        old = held.get(ref)
        if old is not None and old.judged_at == at < now:  # judged now: maybe again
            kept[ref] = old
        else:
            kept[ref] = None
            since = at if since is None or at < since else since
    if since is not None:
        fresh = session.exec(select(EfficiencyRow).where(
            EfficiencyRow.settings_key == key,
            col(EfficiencyRow.judged_at) >= since)).all()
        for row in fresh:
            ref = (row.provider, row.instance_id)
            if ref in kept and kept[ref] is None:
                kept[ref] = _verdict(row)
    return {ref: v for ref, v in kept.items() if v is not None}


def load_one(session: Session, cfg: RecommendSettings, ref: Ref, now: datetime
             ) -> StoredVerdict | None:
    """One instance's verdict as `load` would read it (None: none to trust)."""
    row = session.get(EfficiencyRow, (ref[0], ref[1], settings_key(cfg)))
    if row is None or utc(row.judged_at) <= _trusted_after(cfg, now):
        return None
    return _verdict(row)


def underused_by_team(session: Session, cfg: RecommendSettings, now: datetime
                     ) -> dict[str, tuple[float, float, int]]:
    """Per team, over the verdicts `load` would read: spend on underused instances in
    their windows, $/month their cheaper fits save, and how many; summed in SQL."""
    saving = case((col(EfficiencyRow.monthly_usd) > 0, col(EfficiencyRow.monthly_usd)),
                  else_=0.0)
    rows = session.execute(
        select(col(EfficiencyRow.team), func.sum(col(EfficiencyRow.spend_usd)),
               func.sum(saving), func.count())
        .where(col(EfficiencyRow.settings_key) == settings_key(cfg),
               col(EfficiencyRow.judged_at) > _trusted_after(cfg, now),
               col(EfficiencyRow.underused).is_(True))
        .group_by(col(EfficiencyRow.team))).all()
    return {str(team): (round(float(usd or 0), 2), round(float(save or 0), 2), int(n))
            for team, usd, save, n in rows}


def _trusted_after(cfg: RecommendSettings, now: datetime) -> datetime:
    """Verdicts judged at or before this are too old to trust (two refresh periods)."""
    return now - 2 * cfg.refresh


def _verdict(row: EfficiencyRow) -> StoredVerdict:
    return StoredVerdict(
        efficiency=Efficiency.model_validate(row.efficiency), judged_at=utc(row.judged_at),
        team=row.team, spend_usd=row.spend_usd, fit_to=row.fit_to,
        monthly_usd=row.monthly_usd, reason=row.reason, risks=tuple(row.risks))


def refresh_all(session: Session, instances: Sequence[Instance], now: datetime,
                price: PriceLookup, settings: Sequence[RecommendSettings]) -> int:
    """`refresh` under each distinct set of thresholds (the configured one, and each
    `underused:` condition's)."""
    seen: set[str] = set()
    n = 0
    for cfg in settings:
        if (key := settings_key(cfg)) not in seen:
            seen.add(key)
            n += refresh(session, instances, now, price, cfg)
    return n


