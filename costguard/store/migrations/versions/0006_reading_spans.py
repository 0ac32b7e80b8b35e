"""GPU readings: span_minutes (a cloud metric's point kept whole, not one row per minute)

A CloudWatch point with a 5-minute period was stored as 5 identical rows per GPU; it is now
one row whose `span_minutes` is 5. Existing rows are one minute each, the default.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 20:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('span_minutes', sa.Integer(), nullable=False,
                                      server_default='1'))


def downgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        batch_op.drop_column('span_minutes')
