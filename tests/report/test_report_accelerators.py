"""`report --by accelerator`: GPUs, TPUs, Trainium and Inferentia side by side, from the one
registry of accelerator kinds (costguard/accelerators.py), in SQL as in Python."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from sqlalchemy import Integer, String, column, literal, select

from costguard.accelerators import kind_column, kind_of, kinds
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.report.queries import spend
from costguard.report.render import to_table
from costguard.store.db import Database
from tests.fakes.cloud import BUSY, IDLE, T0, full_cloud
from tests.fakes.scenario import run_for
from tests.report.test_report_owners import NOTIFY_ONLY


@pytest.mark.parametrize(("instance_type", "count", "kind"), [
    ("p5.48xlarge", 8, "GPU"), ("a3-highgpu-8g", 8, "GPU"), ("g5.xlarge", 1, "GPU"),
    ("v5litepod-8", 8, "TPU"), ("v6e-16", 16, "TPU"), ("ct5lp-hightpu-4t", 4, "TPU"),
    ("tpu7x-8", 4, "TPU"), ("trn1.32xlarge", 16, "Trainium"), ("trn2.48xlarge", 16, "Trainium"),
    ("inf2.xlarge", 1, "Inferentia"), ("m5.large", 0, "none"), ("n2-standard-8", 0, "none"),
    ("TRN1.2XLARGE", 1, "Trainium"),
    ("mystery-accelerated-1", 2, "GPU"),  # unclaimed accelerators are GPUs (the default)
])
def test_kind_of_an_instance(instance_type: str, count: int, kind: str) -> None:
    assert kind_of(instance_type, count) == kind


@given(instance_type=st.one_of(
           st.sampled_from(["v5litepod-8", "v4-32", "ct6e-standard-4t", "trn1.2xlarge",
                            "inf1.xlarge", "p4d.24xlarge", "g6.xlarge", "m5.large",
                            "a2-highgpu-1g", "tpu7x-standard-4t", "inf%", "trn_x"]),
           st.text(alphabet="abcdefghinprtuvxTRNV0123456789.-_%", max_size=16)),
       count=st.integers(min_value=-1, max_value=16))
def test_the_sql_expression_says_what_python_says(instance_type: str, count: int) -> None:
    expr = kind_column(literal(instance_type, String()), literal(count, Integer()))
    db = Database("sqlite://")
    with db.session() as s:
        assert s.execute(select(expr)).scalar() == kind_of(instance_type, count)


def test_a_null_count_is_no_accelerator() -> None:
    expr = kind_column(column("t", String()), column("n", Integer()))
    db = Database("sqlite://")
    with db.session() as s:
        row = s.execute(select(expr).select_from(
            select(literal("v5litepod-8").label("t"), literal(None, Integer()).label("n"))
            .subquery())).scalar()
    assert row == "none"


def test_every_kind_names_its_unit_and_types() -> None:
    assert [k.name for k in kinds()] == ["TPU", "Trainium", "Inferentia"]
    for kind in kinds():
        assert kind.unit and kind.type_patterns


@pytest.fixture(scope="module")
def db() -> Database:
    cloud = full_cloud(ManualClock(T0))
    cloud.add("gpu-idle", IDLE)
    cloud.add("gpu-busy", BUSY, gpus=4, itype="g5.12xlarge")
    cloud.add("tpu-idle", IDLE, gpus=8, itype="v5litepod-8")
    cloud.add("trn-busy", BUSY, gpus=1, itype="trn1.2xlarge")
    cloud.add("cpu", IDLE, gpus=0, itype="m5.large")
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text(NOTIFY_ONLY), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    run_for(engine, cloud.clock, timedelta(hours=3), step=timedelta(minutes=10))
    return engine.db


def test_spend_by_accelerator_adds_up_to_spend_by_instance(db: Database) -> None:
    with db.session() as s:
        by_kind = spend(s, ["accelerator"], T0, T0 + timedelta(hours=4))
        by_instance = spend(s, ["instance"], T0, T0 + timedelta(hours=4))
    rows = {r.key[0]: r for r in by_kind.rows}
    inst = {r.key[0]: r for r in by_instance.rows}
    assert set(rows) == {"GPU", "TPU", "Trainium", "none"}
    assert rows["GPU"].cost_micros == inst["gpu-idle"].cost_micros + inst["gpu-busy"].cost_micros
    assert rows["TPU"].cost_micros == inst["tpu-idle"].cost_micros
    assert rows["TPU"].gpu_seconds == inst["tpu-idle"].gpu_seconds > 0  # chip-seconds
    assert rows["TPU"].idle_cost_micros > 0 and rows["Trainium"].idle_cost_micros == 0
    assert (rows["GPU"].instances, rows["TPU"].instances, rows["none"].instances) == (2, 1, 1)
    assert by_kind.total.cost_micros == by_instance.total.cost_micros


def test_accelerator_filters_and_nests(db: Database) -> None:
    with db.session() as s:
        tpu_only = spend(s, ["instance"], T0, T0 + timedelta(hours=4), {"accelerator": "TPU"})
        nested = spend(s, ["team", "accelerator"], T0, T0 + timedelta(hours=4))
    assert [r.key for r in tpu_only.rows] == [("tpu-idle",)]
    assert {r.key[1] for r in nested.rows} == {"GPU", "TPU", "Trainium", "none"}


def test_the_table_speaks_of_accelerator_hours(db: Database) -> None:
    console = Console(width=120, record=True)
    with db.session() as s:
        to_table(spend(s, ["accelerator"], T0, T0 + timedelta(hours=4)), console)
        text = console.export_text()
        assert "accel-h" in text and "GPU-h" not in text
        console = Console(width=120, record=True)
        to_table(spend(s, ["team"], T0, T0 + timedelta(hours=4)), console)
    assert "GPU-h" in console.export_text()
