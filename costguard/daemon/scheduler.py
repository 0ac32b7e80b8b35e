"""`costguard run`: the governance cycle on a schedule, with an HTTP surface, as a service.

Jobs (APScheduler 3, a BackgroundScheduler with an in-memory job store: each replica keeps its
own, since a shared job store double-fires across schedulers):

- `cycle` every `poll_interval`: campaign for leadership, then (leader only) one
  `engine.run_cycle()` (collect, telemetry, accrue, evaluate, act, alert). One job, not one
  per stage: stages feed each other through the store in order, and splitting them would
  only add ways to run them out of order.
- `alerts` every `daemon.alert_interval`: delivers alerts queued between cycles (and retries).
- `prune` every `daemon.prune_interval`: daily cost roll-up, then raw rows past retention.
- `prices` every `costs.price_refresh_interval` (default daily; only with a provider that has
  a price API, so never in the simulated cloud): list prices fetched into the store.

Why these job settings:
- `max_instances=1` plus a lock shared by all jobs that touch the fleet: a cycle that
  overruns its interval is never run twice at once, and alert delivery never races the
  cycle's own alert stage (which would deliver one alert twice).
- `coalesce=True`: ticks missed while a cycle overran (or the host slept) collapse into one
  run. A cycle works from the current state of the fleet, so running the backlog back to back
  would repeat the same work for nothing.
- `misfire_grace_time=poll_interval`: a tick that starts late still runs if it is less than a
  whole interval late; later than that, the next tick is as good.

Shutdown (SIGTERM, SIGINT): no new job starts; the cycle in flight gets
`daemon.shutdown_grace` to finish. If it does not, the process exits anyway: every stop
in flight was journaled as an intent before the cloud call, and the next leader reconciles it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from costguard.config import Settings, daemon_settings
from costguard.costs.settings import costs_settings
from costguard.daemon.connections import raise_open_files_limit
from costguard.daemon.fence import fence_engine
from costguard.daemon.http import HttpServer, ServiceState, build_app, http_limits
from costguard.daemon.leader import Leadership, leadership_for
from costguard.daemon.logs import configure_daemon_logging
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.routes import extra_routes
from costguard.daemon.settings import DaemonSettings
from costguard.engine.cycle import Engine
from costguard.engine.maintain import prune_store
from costguard.engine.summary import CycleSummary, log_stages
from costguard.heap import release_freed_memory
from costguard.providers.base import FetchesPrices

log = logging.getLogger("costguard.daemon")


def failed_stage(exc: BaseException) -> str:
    """The engine stage an exception escaped from (its `_stage(name, ...)` frame)."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "_stage":
            name = frame.f_locals.get("name")
            if isinstance(name, str):
                return name
    return "cycle"


class Daemon:
    """The scheduler, the leader election and the HTTP server of one replica."""

    def __init__(
        self, engine: Engine, settings: Settings, cfg: DaemonSettings | None = None, *,
        leadership: Leadership | None = None, http_port: int | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.cfg = cfg or daemon_settings(settings)
        self.clock = engine.clock
        self.metrics = DaemonMetrics(settings.console.max_instance_series)
        self.state = ServiceState(poll_interval=settings.poll_interval,
                                  readiness_factor=self.cfg.readiness_factor)
        self.leadership = leadership or leadership_for(
            settings.database_url, election=self.cfg.leader_election,
            lock_file=self.cfg.leader_lock_file)
        self._work_lock = threading.Lock()  # one fleet-touching job at a time
        self._stopping = threading.Event()  # no new job starts
        self._fenced_off = threading.Event()  # past the grace: in-flight work may not act
        self._stop_requested = threading.Event()
        fence_engine(engine, self.fence)
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.http: HttpServer | None = None
        self._http_port = settings.http.port if http_port is None else http_port
        self.cycles_run = 0

    # -- leadership -------------------------------------------------------------------
    def fence(self) -> bool:
        """Asked right before every cloud action: may this replica act now?"""
        return not self._fenced_off.is_set() and self.leadership.held()

    def campaign(self) -> bool:
        leading = self.leadership.try_acquire()
        if leading != self.state.leader:
            if leading:
                log.info("leader: this replica now runs the scheduler (%s)",
                         self.leadership.describe())
            else:
                log.warning("standby: another replica leads (%s)", self.leadership.describe())
        self.state.leader = leading
        self.metrics.leader.set(1 if leading else 0)
        return leading

    # -- jobs -------------------------------------------------------------------------
    def cycle_job(self) -> CycleSummary | None:
        if self._stopping.is_set() or not self.campaign():
            return None
        if not self._work_lock.acquire(blocking=False):
            self.metrics.skipped.inc()
            log.warning("cycle skipped: the previous one is still running "
                        "(poll_interval %ss may be too short)",
                        self.settings.poll_interval.total_seconds())
            return None
        try:  # the engine hands what the cycle freed back to the system (costguard/heap.py)
            return self._run_cycle()
        finally:
            self._work_lock.release()

    def _run_cycle(self) -> CycleSummary | None:
        started = time.perf_counter()
        try:
            summary = self.engine.run_cycle()
        except Exception as exc:
            stage = failed_stage(exc)
            self.metrics.observe_failure(stage)
            self.state.last_error = f"{type(exc).__name__} in {stage}"
            log.error("cycle failed: %s: %s", type(exc).__name__,
                      str(exc).splitlines()[0] if str(exc) else "", extra={"stage": stage})
            try:  # what the failed cycle did record (gaps, alerts) is still worth exporting
                with self.engine.db.session() as s:
                    self.metrics.refresh_gaps(s)
                    self.metrics.refresh_alerts(s)
            except Exception:
                pass
            return None
        seconds = time.perf_counter() - started
        self.cycles_run += 1
        self.metrics.observe_cycle(summary, seconds)
        log_stages(summary, log)
        now = self.clock.now()
        self.state.last_cycle_at, self.state.last_cycle_id = now, summary.cycle_id
        self.state.last_error = None
        self.metrics.last_cycle.set(now.timestamp())
        try:
            with self.engine.db.session() as s:
                figures = getattr(self.engine.providers.get("k8s"), "figures", None)
                self.metrics.refresh_from_store(
                    s, now, self.engine.settings.recommend,
                    budgets=self.engine.policies.budgets,
                    poll_interval=self.settings.poll_interval,
                    workloads=figures() if callable(figures) else ())
        except Exception as exc:  # gauges are best effort; the cycle itself succeeded
            log.warning("metrics refresh failed: %s", type(exc).__name__)
        return summary

    def alerts_job(self) -> int:
        if self._stopping.is_set() or not self.leadership.held():
            return 0
        if not self._work_lock.acquire(blocking=False):
            return 0  # the cycle's own alert stage is delivering
        try:
            return dispatch_alerts(self.engine, self.clock.now(), self.metrics)
        except Exception as exc:
            log.warning("alert dispatch failed: %s: %s", type(exc).__name__, exc)
            return 0
        finally:
            self._work_lock.release()

    def prune_job(self) -> dict[str, int]:
        if self._stopping.is_set() or not self.leadership.held():
            return {}
        with self._work_lock:
            try:
                return prune_store(self.engine, self.settings, self.clock.now())
            except Exception as exc:
                log.warning("prune failed: %s: %s", type(exc).__name__, exc)
                return {}
            finally:
                # settling an hour of readings fills as much heap as a cycle: handed back
                # now, not at the end of the next cycle (costguard/heap.py)
                release_freed_memory()

    def prices_job(self) -> int:
        """Fetch current list prices into the store (leader only); how many were stored."""
        if self._stopping.is_set() or not self.leadership.held():
            return 0
        from costguard.costs.prices import refresh_prices

        with self._work_lock:
            try:
                with self.engine.db.session() as s:
                    outcomes = refresh_prices(s, self.engine.providers, self.clock.now())
            except Exception as exc:
                log.warning("price refresh failed: %s: %s", type(exc).__name__, exc)
                return 0
        for o in outcomes:
            if o.error:
                log.warning("prices not refreshed for %s: %s", o.provider, o.error)
            else:
                log.info("prices refreshed", extra={"provider": o.provider, "stored": o.stored,
                                                    "unpriced": len(o.unpriced)})
        return sum(o.stored for o in outcomes)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.state.started_at = self.clock.now()
        # a descriptor per client connection and per kept-alive cloud connection
        raise_open_files_limit()
        if self.cfg.http_enabled:
            from costguard.console.app import console_routes, host_check

            routes = extra_routes(self.settings, self.cfg, self.engine.db, self.metrics,
                                  self.clock)
            routes += console_routes(self.settings, self.engine.db, self.clock,
                                     lambda: self.engine.policies, self.settings.http.host)
            app = build_app(self.engine.db, self.state, self.metrics, self.clock,
                            extra_routes=routes,
                            allowed_hosts=host_check(self.settings, self.settings.http.host))
            self.http = HttpServer(app, self.settings.http.host, self._http_port,
                                   **http_limits(self.settings))
            self.http.start()
            log.info("http: listening on %s:%s", self.settings.http.host, self.http.port)
        poll = self.settings.poll_interval.total_seconds()
        common: dict[str, Any] = {"max_instances": 1, "coalesce": True}
        self.scheduler.add_job(self.cycle_job, "interval", seconds=poll, id="cycle",
                               next_run_time=datetime.now(UTC), misfire_grace_time=int(poll) or 1,
                               **common)
        alert_s = self.cfg.alert_interval.total_seconds()
        self.scheduler.add_job(self.alerts_job, "interval", seconds=alert_s, id="alerts",
                               misfire_grace_time=int(alert_s) or 1, **common)
        prune_s = self.cfg.prune_interval.total_seconds()
        self.scheduler.add_job(self.prune_job, "interval", seconds=prune_s, id="prune",
                               next_run_time=datetime.now(UTC)
                               + timedelta(seconds=min(prune_s, 60)),
                               misfire_grace_time=int(prune_s), **common)
        price_every = costs_settings(self.settings).price_refresh_interval
        if price_every is not None and any(isinstance(p, FetchesPrices)
                                           for p in self.engine.providers.values()):
            price_s = price_every.total_seconds()
            self.scheduler.add_job(self.prices_job, "interval", seconds=price_s, id="prices",
                                   next_run_time=datetime.now(UTC)
                                   + timedelta(seconds=min(price_s, 120)),
                                   misfire_grace_time=int(price_s), **common)
        self.scheduler.start()
        log.info("scheduler: cycle every %ss, alerts every %ss, prune every %ss",
                 poll, alert_s, prune_s)

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        if not self._stop_requested.is_set():
            log.info("shutdown requested%s", f" (signal {signum})" if signum else "")
        self._stop_requested.set()

    def shutdown(self) -> bool:
        """Stop cleanly; True when no work was left in flight."""
        self._stopping.set()
        self.scheduler.shutdown(wait=False)
        grace = self.cfg.shutdown_grace.total_seconds()
        finished = self._work_lock.acquire(timeout=grace)
        if finished:
            self._work_lock.release()
        else:
            self._fenced_off.set()  # whatever still runs may no longer touch the cloud
            log.error("shutdown: the cycle in flight did not finish within %ss; exiting. "
                      "Stops it journaled are reconciled by the next leader.", grace)
        self.leadership.release()
        self.state.leader = False
        if self.http is not None:
            self.http.stop()
        log.info("shutdown complete (%d cycles run)", self.cycles_run)
        return finished

    def serve_until_signal(self) -> bool:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.request_stop)
        self.start()
        while not self._stop_requested.wait(timeout=1.0):
            pass
        return self.shutdown()


def dispatch_alerts(engine: Engine, now: datetime, metrics: DaemonMetrics | None = None) -> int:
    """Deliver pending alerts between cycles through the engine's configured channels."""
    sent = 0
    public = getattr(engine, "dispatch_alerts", None)  # a richer dispatcher, if the engine has one
    if callable(public):
        sent = int(public(now) or 0)
    elif engine.settings.alerts.console:
        from costguard.alerts.console import dispatch_console

        sent = dispatch_console(engine.db, now, engine.alert_printer)
    if metrics is not None:
        with engine.db.session() as s:
            metrics.refresh_alerts(s)
    return sent


def run_forever(engine: Engine, settings: Settings) -> None:
    """`costguard run`: serve until SIGTERM/SIGINT."""
    cfg = daemon_settings(settings)
    configure_daemon_logging(settings, cfg)
    daemon = Daemon(engine, settings, cfg)
    finished = daemon.serve_until_signal()
    if not finished:
        logging.shutdown()
        os._exit(0)  # a cycle thread still runs; its journaled intents are safe to abandon
