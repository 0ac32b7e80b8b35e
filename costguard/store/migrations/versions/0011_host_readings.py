"""GPU readings: GPM tensor and DRAM activity, and the host's CPU and memory

What the efficiency verdict needs to name a bottleneck (a data loader pegging the CPUs while
the GPU waits). Existing rows have none of it: NULL, read as "not measured".

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

_FLOATS = ('tensor_mean', 'dram_bw_mean', 'host_cpu_pct', 'host_iowait_pct')
_INTS = ('host_cpus', 'host_hot_cores')
_BIGS = ('host_mem_used_bytes', 'host_mem_total_bytes')


def upgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        for name in _FLOATS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
        for name in _INTS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=True))
        for name in _BIGS:
            batch_op.add_column(sa.Column(name, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('gpu_readings', schema=None) as batch_op:
        for name in reversed(_FLOATS + _INTS + _BIGS):
            batch_op.drop_column(name)
