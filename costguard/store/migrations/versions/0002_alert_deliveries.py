"""Alert deliveries: one row per alert, channel and recipient (dedupe key, Slack ts, Message-ID)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 12:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import costguard.store.types

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('alert_deliveries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dedupe_key', sqlmodel.sql.sqltypes.AutoString(length=600), nullable=False),
    sa.Column('alert_id', sa.Integer(), nullable=True),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('target', sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', costguard.store.types.UTCDateTime(), nullable=False),
    sa.Column('next_attempt_at', costguard.store.types.UTCDateTime(), nullable=False),
    sa.Column('claimed_at', costguard.store.types.UTCDateTime(), nullable=True),
    sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('sent_at', costguard.store.types.UTCDateTime(), nullable=True),
    sa.Column('external_id', sqlmodel.sql.sqltypes.AutoString(length=256), nullable=True),
    sa.Column('digest_id', sa.Integer(), nullable=True),
    sa.Column('last_error', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('dedupe_key'),
    )
    with op.batch_alter_table('alert_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alert_deliveries_alert_id'), ['alert_id'],
                              unique=False)
        batch_op.create_index(batch_op.f('ix_alert_deliveries_digest_id'), ['digest_id'],
                              unique=False)
        batch_op.create_index('ix_alert_deliveries_due', ['status', 'next_attempt_at'],
                              unique=False)
        batch_op.create_index('ix_alert_deliveries_recipient', ['channel', 'target', 'sent_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('alert_deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_alert_deliveries_recipient')
        batch_op.drop_index('ix_alert_deliveries_due')
        batch_op.drop_index(batch_op.f('ix_alert_deliveries_digest_id'))
        batch_op.drop_index(batch_op.f('ix_alert_deliveries_alert_id'))
    op.drop_table('alert_deliveries')
