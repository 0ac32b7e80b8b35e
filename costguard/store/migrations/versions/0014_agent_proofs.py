"""agent_proofs: when each agent last proved which instance it runs on (POST /v1/identity),
for `costguard status`'s count of proven agents

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 22:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'agent_proofs',
        sa.Column('provider', sa.String(length=16), nullable=False),
        sa.Column('instance_id', sa.String(length=128), nullable=False),
        sa.Column('form', sa.String(length=16), nullable=False),
        sa.Column('verified_by', sa.String(length=200), nullable=False),
        sa.Column('proven_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('provider', 'instance_id'),
    )
    with op.batch_alter_table('agent_proofs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_agent_proofs_proven_at'), ['proven_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('agent_proofs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_agent_proofs_proven_at'))
    op.drop_table('agent_proofs')
