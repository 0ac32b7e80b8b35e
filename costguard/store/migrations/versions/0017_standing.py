"""standing: volumes, snapshots and addresses that bill while nothing runs

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 17:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def _text(length: int) -> sqlmodel.sql.sqltypes.AutoString:
    return sqlmodel.sql.sqltypes.AutoString(length=length)


def upgrade() -> None:
    op.create_table(
        'standing',
        sa.Column('provider', _text(16), nullable=False),
        sa.Column('resource_id', _text(128), nullable=False),
        sa.Column('kind', _text(16), nullable=False),
        sa.Column('account', _text(128), nullable=False),
        sa.Column('region', _text(64), nullable=False),
        sa.Column('zone', _text(64), nullable=True),
        sa.Column('name', _text(256), nullable=True),
        sa.Column('state', _text(32), nullable=False),
        sa.Column('in_use', sa.Boolean(), nullable=False),
        sa.Column('used_by', sa.JSON(), nullable=False),
        sa.Column('size_gb', sa.Integer(), nullable=True),
        sa.Column('detail', _text(256), nullable=False),
        sa.Column('created_at', UTCDateTime(), nullable=True),
        sa.Column('unused_since', UTCDateTime(), nullable=True),
        sa.Column('usd_per_month', sa.Float(), nullable=True),
        sa.Column('price_source', _text(128), nullable=False),
        sa.Column('tags', sa.JSON(), nullable=False),
        sa.Column('team', _text(128), nullable=True),
        sa.Column('first_seen', UTCDateTime(), nullable=False),
        sa.Column('last_seen', UTCDateTime(), nullable=False),
        sa.Column('gone', sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint('provider', 'resource_id'),
    )
    with op.batch_alter_table('standing', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_standing_kind'), ['kind'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('standing', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_standing_kind'))
    op.drop_table('standing')
