"""Stored efficiency verdicts: one per GPU instance and set of thresholds, judged once a
day, read by the `underused:` condition, the underused-spend metric and the weekly digest

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'efficiency_verdicts',
        sa.Column('provider', sa.String(length=16), nullable=False),
        sa.Column('instance_id', sa.String(length=128), nullable=False),
        sa.Column('settings_key', sa.String(length=16), nullable=False),
        sa.Column('judged_at', UTCDateTime(), nullable=False),
        sa.Column('bottleneck', sa.String(length=24), nullable=False),
        sa.Column('underused', sa.Boolean(), nullable=False),
        sa.Column('team', sa.String(length=256), nullable=False),
        sa.Column('spend_usd', sa.Float(), nullable=False),
        sa.Column('fit_to', sa.String(length=64), nullable=True),
        sa.Column('monthly_usd', sa.Float(), nullable=False),
        sa.Column('reason', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column('risks', sa.JSON(), nullable=False),
        sa.Column('efficiency', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('provider', 'instance_id', 'settings_key'),
    )
    with op.batch_alter_table('efficiency_verdicts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_efficiency_verdicts_judged_at'), ['judged_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('efficiency_verdicts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_efficiency_verdicts_judged_at'))
    op.drop_table('efficiency_verdicts')
