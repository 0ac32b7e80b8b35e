"""Anomalies: one row per continuing run of anomalous buckets (its last bucket, its end when
spend came back, how many buckets, and the impact last alerted), not one per bucket

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa

import costguard.store.types
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('anomalies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_bucket', costguard.store.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('ended_at', costguard.store.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('buckets', sa.Integer(), nullable=False,
                                      server_default='1'))
        batch_op.add_column(sa.Column('alerted_impact_micros', sa.BigInteger(), nullable=False,
                                      server_default='0'))
    # an anomaly stored before runs is a run of one bucket, over (it was judged once)
    op.execute("UPDATE anomalies SET last_bucket = bucket_start")
    op.execute("UPDATE anomalies SET alerted_impact_micros = impact_micros WHERE status = 'open'")


def downgrade() -> None:
    with op.batch_alter_table('anomalies', schema=None) as batch_op:
        batch_op.drop_column('alerted_impact_micros')
        batch_op.drop_column('buckets')
        batch_op.drop_column('ended_at')
        batch_op.drop_column('last_bucket')
