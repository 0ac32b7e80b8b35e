"""POST /v1/telemetry into the real store (StoreSink) over loopback HTTP, on SQLite and on
PostgreSQL: idempotent per (host, gpu, minute), honest counts, whole batches or nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.sink import StoreSink
from costguard.store.db import Database
from costguard.store.tables import GpuReadingRow
from costguard.telemetry.ingest import telemetry_app
from tests.fakes.loopback import serve

TOKEN = "store-ingest-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def item(k: int, host: str = "i-store", gpu: int = 0, util: float = 50.0) -> dict[str, Any]:
    return {"provider": "aws", "instance_id": host, "gpu_index": gpu, "source": "agent",
            "minute": (START + timedelta(minutes=k)).isoformat().replace("+00:00", "Z"),
            "samples": 60, "util_mean": util, "sm_mean": util / 2}


@pytest.fixture
def store(db_url: str) -> Iterator[tuple[httpx.Client, Database]]:
    db = Database(db_url)
    app = telemetry_app(token=TOKEN, sink=StoreSink(db, DaemonMetrics()),
                        max_body_bytes=4 * 2**20, clock=lambda: START + timedelta(days=1))
    try:
        with serve(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client, db
    finally:
        db.dispose()


def rows(db: Database) -> list[tuple[Any, ...]]:
    with db.engine.connect() as conn:
        t = GpuReadingRow.__table__  # type: ignore[attr-defined]
        return [tuple(r) for r in conn.execute(
            select(t.c.instance_id, t.c.gpu_index, t.c.minute, t.c.util_mean)
            .order_by(t.c.instance_id, t.c.gpu_index, t.c.minute))]


def count(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(
            GpuReadingRow.__table__)).scalar_one())  # type: ignore[attr-defined]


def post(client: httpx.Client, body: Any) -> httpx.Response:
    return client.post("/v1/telemetry", json=body, headers=AUTH)


def test_a_batch_is_stored_once_and_a_resend_writes_nothing(store):  # type: ignore[no-untyped-def]
    client, db = store
    batch = [item(k, gpu=g) for k in range(3) for g in range(8)]
    assert post(client, {"minutes": batch}).json() == {
        "received": 24, "written": 24, "duplicates": 0}
    assert post(client, batch).json() == {"received": 24, "written": 0, "duplicates": 24}
    assert count(db) == 24
    stored = rows(db)
    assert stored[0][2] == START and stored[0][3] == 50.0  # aware UTC back from either store


def test_the_first_write_of_a_key_wins_and_a_partial_overlap_counts_only_new_rows(store):  # type: ignore[no-untyped-def]
    client, db = store
    post(client, [item(0), item(1)])
    answer = post(client, [item(1, util=99.0), item(2, util=7.0)]).json()
    assert answer == {"received": 2, "written": 1, "duplicates": 1}
    assert [r[3] for r in rows(db)] == [50.0, 50.0, 7.0]


def test_the_same_minute_twice_in_one_batch_is_one_row_even_in_another_offset(store):  # type: ignore[no-untyped-def]
    client, db = store
    same = {**item(0, util=80.0), "minute": "2026-11-02T10:00:00+01:00"}  # = 09:00Z
    answer = post(client, [item(0), same]).json()
    assert answer == {"received": 2, "written": 1, "duplicates": 1}
    assert [r[3] for r in rows(db)] == [50.0]


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("minute", "2026-11-02T09:00:00", "UTC offset"),
    ("instance_id", "i-" + "x" * 127, "longer than 128"),
])
def test_a_summary_the_store_cannot_hold_is_a_422_not_a_503(store, field, value, reason):  # type: ignore[no-untyped-def]
    client, db = store
    bad = {**item(5), field: value}
    answer = post(client, [item(4), bad])
    assert answer.status_code == 422, answer.text
    assert answer.json()["index"] == 1
    assert reason in answer.json()["error"]
    assert count(db) == 0


def _poison_trigger(db: Database) -> None:
    """Make the database itself refuse one row, whatever the statement looks like."""
    with db.engine.begin() as conn:
        if db.engine.dialect.name == "postgresql":
            conn.execute(text(
                "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
                "IF NEW.instance_id = 'i-poison' THEN RAISE EXCEPTION 'poison row'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"))
            conn.execute(text("CREATE TRIGGER poison BEFORE INSERT ON gpu_readings "
                              "FOR EACH ROW EXECUTE FUNCTION poison()"))
        else:
            conn.execute(text(
                "CREATE TRIGGER poison BEFORE INSERT ON gpu_readings "
                "WHEN NEW.instance_id = 'i-poison' BEGIN SELECT RAISE(ABORT, 'poison row'); END"))


def test_a_database_failure_on_the_last_row_leaves_nothing_of_the_batch(store):  # type: ignore[no-untyped-def]
    client, db = store
    _poison_trigger(db)
    # more rows than one multi-row INSERT page, so the batch spans several statements
    batch = [item(k, gpu=g) for k in range(300) for g in range(8)] + [item(0, host="i-poison")]
    answer = post(client, batch)
    assert answer.status_code == 503, answer.text
    assert count(db) == 0
    assert post(client, batch[:-1]).json()["written"] == 2400  # the agent's retry, fixed


def test_concurrent_agents_resending_overlapping_batches_count_each_row_once(store):  # type: ignore[no-untyped-def]
    client, db = store
    written: list[int] = []
    lock = threading.Lock()

    def agent(n: int) -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as own:
            for start in range(0, 40, 5):  # windows of 10 minutes, overlapping by 5
                batch = [item(k, host=f"i-{n % 2}", gpu=g)
                         for k in range(start, start + 10) for g in range(2)]
                answer = post(own, batch)
                assert answer.status_code == 200, answer.text
                with lock:
                    written.append(answer.json()["written"])

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = 2 * 45 * 2  # two hosts, minutes 0-44, two GPUs
    assert len(written) == 4 * 8
    assert sum(written) == expected
    assert count(db) == expected


def test_every_field_of_a_summary_is_stored_as_sent(store):  # type: ignore[no-untyped-def]
    # on PostgreSQL a batch goes in as one array per column (daemon/sink.py unnest_insert):
    # each column's type, NULLs and the largest values the model allows come back whole
    from costguard.model import INT32, INT64, GpuMinute
    from costguard.store.readings import read_minutes

    client, db = store
    full = {**item(0, "i-every"), "span_minutes": 5, "samples": INT32, "util_p95": 99.5,
            "util_max": 100.0, "util_active_share": 0.125, "sm_p95": 12.5, "sm_max": 33.25,
            "mem_used_bytes": INT64, "mem_total_bytes": 80 * 2**30, "power_w_mean": 699.99,
            "process_count": 3, "top_process_pid": INT32, "top_process_bytes": 2**40,
            "tensor_mean": 1.5, "dram_bw_mean": 2.5, "host_cpu_pct": 74.99,
            "host_iowait_pct": 0.01, "host_cpus": 192, "host_hot_cores": 0,
            "host_mem_used_bytes": 2**41, "host_mem_total_bytes": 2**42, "power_limit_w": 700.0,
            "host_disk_bps": 1.5e9, "host_net_bps": 0.0, "host_sessions": 2,
            "host_input_idle_s": 12.5, "kernels_busy": 1, "kernel_idle_s": 3600.5,
            "gpu_proc_cpu_pct": 812.5, "gpu_proc_age_s": 86400.0}
    sparse = item(1, "i-every", gpu=1)  # most columns NULL
    assert post(client, {"minutes": [full, sparse]}).json()["written"] == 2
    with db.session() as s:
        got = read_minutes(s, [("aws", "i-every")], START, START + timedelta(hours=1))
    back = sorted(got[("aws", "i-every")], key=lambda m: m.gpu_index)
    assert back == [GpuMinute.model_validate(full), GpuMinute.model_validate(sparse)]
