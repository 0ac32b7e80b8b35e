"""Prices fetched from the clouds' price APIs or learned from bills, and the age of every
price source the accrual has used

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'prices',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('provider', sa.String(length=16), nullable=False),
        sa.Column('region', sa.String(length=64), nullable=False),
        sa.Column('instance_type', sa.String(length=64), nullable=False),
        sa.Column('lifecycle', sa.String(length=16), nullable=False),
        sa.Column('instance_id', sa.String(length=128), nullable=False),
        sa.Column('usd_per_hour', sa.Float(), nullable=False),
        sa.Column('source', sa.String(length=96), nullable=False),
        sa.Column('as_of', UTCDateTime(), nullable=False),
        sa.Column('published_at', UTCDateTime(), nullable=True),
        sa.Column('fetched_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('provider', 'region', 'instance_type', 'lifecycle', 'instance_id',
                            name='uq_price'),
    )
    op.create_table(
        'price_sources',
        sa.Column('source', sa.String(length=128), nullable=False),
        sa.Column('as_of', UTCDateTime(), nullable=True),
        sa.Column('fallback', sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint('source'),
    )


def downgrade() -> None:
    op.drop_table('price_sources')
    op.drop_table('prices')
