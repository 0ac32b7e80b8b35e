"""Alembic environment: runs against the engine handed in by costguard.store.db."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from costguard.store.db import load_all_tables

load_all_tables()  # registers every table on SQLModel.metadata
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    engine = context.config.attributes.get("engine")
    if engine is None:
        raise RuntimeError("costguard migrations run through costguard.store.db.upgrade()")
    with engine.begin() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
