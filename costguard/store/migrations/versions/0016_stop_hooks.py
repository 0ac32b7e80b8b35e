"""stop_hooks: pre-stop hooks a stop waits on (a checkpoint command or a signal the host's
agent runs before the instance is stopped)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 01:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'stop_hooks',
        sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column('stop_key', sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
        sa.Column('policy', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('instance_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('signal', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column('timeout_s', sa.Integer(), nullable=False),
        sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('detail', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column('requested_at', UTCDateTime(), nullable=False),
        sa.Column('deadline', UTCDateTime(), nullable=False),
        sa.Column('delivered_at', UTCDateTime(), nullable=True),
        sa.Column('finished_at', UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('stop_key'),
    )
    with op.batch_alter_table('stop_hooks', schema=None) as batch_op:
        batch_op.create_index('ix_stop_hooks_instance', ['provider', 'instance_id', 'status'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('stop_hooks', schema=None) as batch_op:
        batch_op.drop_index('ix_stop_hooks_instance')
    op.drop_table('stop_hooks')
