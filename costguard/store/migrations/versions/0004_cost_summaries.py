"""Costs: per-day summary over report dimensions and per-instance day runs

Both are derived from cost_daily: the next rollup fills them (rebuilding them from
cost_daily when they lag behind it), and reports read cost_daily until then.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 13:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import costguard.store.types


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def _dimensions() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column('account', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('region', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('instance_type', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('lifecycle', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('team', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column('project', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column('env', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column('cost_center', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    ]


def upgrade() -> None:
    op.create_table('cost_daily_summary',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('day', costguard.store.types.UTCDateTime(), nullable=False),
    sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    *_dimensions(),
    sa.Column('state', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('gpu_count', sa.Integer(), nullable=False),
    sa.Column('instance_seconds', sa.BigInteger(), nullable=False),
    sa.Column('cost_micros', sa.BigInteger(), nullable=False),
    sa.Column('idle_cost_micros', sa.BigInteger(), nullable=False),
    sa.Column('gpu_seconds', sa.BigInteger(), nullable=False),
    sa.Column('idle_gpu_seconds', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('cost_daily_summary', schema=None) as batch_op:
        batch_op.create_index('ix_cost_daily_summary_day', ['day'], unique=False)

    op.create_table('cost_instance_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('instance_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    *_dimensions(),
    sa.Column('first_day', costguard.store.types.UTCDateTime(), nullable=False),
    sa.Column('last_day', costguard.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('cost_instance_runs', schema=None) as batch_op:
        batch_op.create_index('ix_cost_instance_runs_instance',
                              ['provider', 'instance_id', 'last_day'], unique=False)
        batch_op.create_index('ix_cost_instance_runs_last_day', ['last_day'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('cost_instance_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_cost_instance_runs_last_day')
        batch_op.drop_index('ix_cost_instance_runs_instance')
    op.drop_table('cost_instance_runs')
    with op.batch_alter_table('cost_daily_summary', schema=None) as batch_op:
        batch_op.drop_index('ix_cost_daily_summary_day')
    op.drop_table('cost_daily_summary')
