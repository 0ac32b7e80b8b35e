"""Instances: kind, the registry kind a listed machine is governed as (`instance`, or
`notebook` for a SageMaker notebook instance or a Vertex AI Workbench instance,
`workload` for a Kubernetes workload)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 23:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default='instance'))
    op.execute("UPDATE instances SET kind = 'workload' WHERE provider = 'k8s'")


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('kind')
