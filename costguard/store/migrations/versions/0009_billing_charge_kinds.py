"""Billing lines keep what kind of charge they are (FOCUS ChargeCategory and ChargeClass) and
the currency the cloud billed them in

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('billing_lines', schema=None) as batch_op:
        batch_op.add_column(sa.Column('charge_category', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('charge_class', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('currency', sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('billing_lines', schema=None) as batch_op:
        batch_op.drop_column('currency')
        batch_op.drop_column('charge_class')
        batch_op.drop_column('charge_category')
