"""Readings kept compactly: a compressed block of raw minutes and an hourly history per
instance and hour (`reading_series`, `reading_blocks`, `reading_hours`). The rows already in
`gpu_readings` move into them by `costguard.store.compact` (the daemon's hourly prune, or
`costguard db compact`), in batches, each committed: not here, where a large store would
hold one transaction for hours.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03 02:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'reading_series',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('instance_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('provider', 'instance_id', name='uq_reading_series'),
    )
    for table in ('reading_blocks', 'reading_hours'):
        op.create_table(
            table,
            sa.Column('series_id', sa.Integer(), autoincrement=False, nullable=False),
            sa.Column('hour', sa.Integer(), autoincrement=False, nullable=False),
            sa.Column('sources', sa.SmallInteger(), nullable=False),
            sa.Column('payload', sa.LargeBinary(), nullable=False),
            sa.PrimaryKeyConstraint('series_id', 'hour'),
            sqlite_with_rowid=False,
        )
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(f'ix_{table}_hour', ['hour'], unique=False)


def downgrade() -> None:
    for table in ('reading_hours', 'reading_blocks'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(f'ix_{table}_hour')
        op.drop_table(table)
    op.drop_table('reading_series')
