"""reservations: a capacity reservation's capacity and use, and its use over time

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 20:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('standing', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reservation', sa.JSON(), nullable=True))
    op.create_table(
        'reservation_use',
        sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('resource_id', sqlmodel.sql.sqltypes.AutoString(length=128),
                  nullable=False),
        sa.Column('at', UTCDateTime(), nullable=False),
        sa.Column('capacity', sa.Integer(), nullable=False),
        sa.Column('used', sa.Integer(), nullable=False),
        sa.Column('accelerators', sa.Integer(), nullable=False),
        sa.Column('unit_usd_per_hour', sa.Float(), nullable=True),
        sa.Column('team', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.PrimaryKeyConstraint('provider', 'resource_id', 'at'),
    )


def downgrade() -> None:
    op.drop_table('reservation_use')
    with op.batch_alter_table('standing', schema=None) as batch_op:
        batch_op.drop_column('reservation')
