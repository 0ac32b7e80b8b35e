"""Bills are kept as sums per day (billing_costs) and each imported line as an 8-byte key
(in blobs per source and day, billing_line_keys), where every line was a row of
billing_lines: SQLite wrote at most ~80,000 such rows a second. The lines already imported
are summed into their days, and their old keys are kept (billing_legacy_keys), so an
export imported before this revision adds nothing when imported again.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 22:00:00.000000
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from alembic import op
from costguard.store.types import UTCDateTime

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

_GROUP = ('provider', 'account', 'region', 'service', 'resource_id', 'team', 'project', 'env',
          'cost_center', 'charge_category', 'charge_class', 'currency')
_LINE_COLUMNS = [
    sa.Column('provider', sa.String(length=32), nullable=True),
    sa.Column('account', sa.String(length=128), nullable=True),
    sa.Column('region', sa.String(length=64), nullable=True),
    sa.Column('service', sa.String(length=128), nullable=True),
    sa.Column('resource_id', sa.String(length=512), nullable=True),
]
_ATTRIBUTION = [
    sa.Column('team', sa.String(length=128), nullable=True),
    sa.Column('project', sa.String(length=128), nullable=True),
    sa.Column('env', sa.String(length=64), nullable=True),
    sa.Column('cost_center', sa.String(length=128), nullable=True),
    sa.Column('charge_category', sa.String(length=32), nullable=True),
    sa.Column('charge_class', sa.String(length=32), nullable=True),
    sa.Column('currency', sa.String(length=8), nullable=True),
]


def _copy(columns: list[sa.Column[Any]]) -> list[sa.Column[Any]]:
    return [c._copy() for c in columns]


def upgrade() -> None:
    costs = op.create_table(
        'billing_costs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('day', sa.Integer(), nullable=False),
        sa.Column('group_key', sa.BigInteger(), nullable=False),
        sa.Column('imported_at', UTCDateTime(), nullable=False),
        sa.Column('charge_start', UTCDateTime(), nullable=False),
        sa.Column('charge_end', UTCDateTime(), nullable=False),
        *_copy(_LINE_COLUMNS),
        sa.Column('billed_micros', sa.BigInteger(), nullable=False),
        sa.Column('effective_micros', sa.BigInteger(), nullable=False),
        sa.Column('lines', sa.BigInteger(), nullable=False),
        *_copy(_ATTRIBUTION),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('source', 'day', 'group_key', name='uq_billing_cost'),
    )
    with op.batch_alter_table('billing_costs', schema=None) as batch_op:
        batch_op.create_index('ix_billing_costs_start', ['charge_start'], unique=False)
    op.create_table(
        'billing_line_keys',
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('day', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('chunk', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('line_keys', sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint('source', 'day', 'chunk'),
    )
    legacy = op.create_table(
        'billing_legacy_keys',
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('line_key', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('source', 'line_key'),
        sqlite_with_rowid=False,
    )
    _move_lines(costs, legacy)
    with op.batch_alter_table('billing_lines', schema=None) as batch_op:
        batch_op.drop_index('ix_billing_lines_start')
    op.drop_table('billing_lines')


def _move_lines(costs: sa.Table, legacy: sa.Table) -> None:
    """billing_lines' rows summed into their days; their keys kept as legacy keys."""
    from costguard.billing.store import day_number, group_key

    conn = op.get_bind()
    lines = sa.table('billing_lines', sa.column('source'), sa.column('line_key'),
                     sa.column('imported_at', UTCDateTime()),
                     sa.column('charge_start', UTCDateTime()),
                     sa.column('charge_end', UTCDateTime()),
                     sa.column('billed_micros'), sa.column('effective_micros'),
                     *(sa.column(c) for c in _GROUP))
    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    keys: list[dict[str, str]] = []
    for row in conn.execute(sa.select(lines)).mappings():
        keys.append({'source': row['source'], 'line_key': row['line_key']})
        start, end = _utc(row['charge_start']), _utc(row['charge_end'])
        values = tuple(row[c] for c in _GROUP)
        group = (row['source'], start.date(), *values)
        acc = sums.get(group)
        if acc is None:
            sums[group] = {'source': row['source'], 'day': day_number(start),
                           'group_key': group_key(start.date(), values),
                           'imported_at': _utc(row['imported_at']), 'charge_start': start,
                           'charge_end': end, 'billed_micros': 0, 'effective_micros': 0,
                           'lines': 0, **dict(zip(_GROUP, values, strict=True))}
            acc = sums[group]
        acc['charge_start'] = min(acc['charge_start'], start)
        acc['charge_end'] = max(acc['charge_end'], end)
        acc['imported_at'] = max(acc['imported_at'], _utc(row['imported_at']))
        acc['billed_micros'] += int(row['billed_micros'])
        acc['effective_micros'] += int(row['effective_micros'])
        acc['lines'] += 1
    if sums:
        conn.execute(costs.insert(), list(sums.values()))
    if keys:
        conn.execute(legacy.insert(), keys)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def downgrade() -> None:
    op.create_table(
        'billing_lines',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('line_key', sa.String(length=64), nullable=False),
        sa.Column('imported_at', UTCDateTime(), nullable=False),
        sa.Column('charge_start', UTCDateTime(), nullable=False),
        sa.Column('charge_end', UTCDateTime(), nullable=False),
        *_copy(_LINE_COLUMNS),
        sa.Column('billed_micros', sa.BigInteger(), nullable=False),
        sa.Column('effective_micros', sa.BigInteger(), nullable=False),
        *_copy(_ATTRIBUTION),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('source', 'line_key', name='uq_billing_line'),
    )
    with op.batch_alter_table('billing_lines', schema=None) as batch_op:
        batch_op.create_index('ix_billing_lines_start', ['charge_start'], unique=False)
    # each day's sums become one line (the lines they were summed from are not kept)
    op.execute(
        "INSERT INTO billing_lines (source, line_key, imported_at, charge_start, charge_end, "
        + ", ".join(_GROUP) + ", billed_micros, effective_micros) "
        "SELECT source, 'day:' || CAST(group_key AS VARCHAR(24)), imported_at, charge_start, "
        "charge_end, " + ", ".join(_GROUP) + ", billed_micros, effective_micros "
        "FROM billing_costs")
    op.drop_table('billing_legacy_keys')
    op.drop_table('billing_line_keys')
    with op.batch_alter_table('billing_costs', schema=None) as batch_op:
        batch_op.drop_index('ix_billing_costs_start')
    op.drop_table('billing_costs')
