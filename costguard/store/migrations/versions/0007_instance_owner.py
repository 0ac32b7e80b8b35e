"""Instances: owner (the controller that owns an instance: Auto Scaling group, managed instance
group, node pool ...), as JSON; NULL for a pet VM

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 21:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('owner')
