"""Instances: launched_by (AWS instance profile ARN / GCP service account email)

Read from the inventory listing itself (no extra calls) and used by the attribution
derivation rule `from: launcher`. Existing rows get NULL until the next poll fills them.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 15:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('launched_by', sa.String(length=512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('launched_by')
