"""GPU readings: the power limit and the host activity that corroborates work in progress

What the signal checks (telemetry/trust.py) and the stop's host corroboration
(policy/stop_check.py) read. Existing rows have none of it: NULL, read as "not measured",
which never holds a stop back and never marks a minute untrusted.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

_INTS = ('host_sessions', 'kernels_busy')
_COLUMNS = ('power_limit_w', 'host_disk_bps', 'host_net_bps', 'host_sessions',
            'host_input_idle_s', 'kernels_busy', 'kernel_idle_s', 'gpu_proc_cpu_pct',
            'gpu_proc_age_s')  # the model's order (store/tables.py)


def upgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        for name in _COLUMNS:
            kind = sa.Integer() if name in _INTS else sa.Float()
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        for name in reversed(_COLUMNS):
            batch_op.drop_column(name)
