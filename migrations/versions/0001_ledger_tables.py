"""The helix ledger: sessions, runs, messages, checkpoints, calls, attempts, usage, stops, events.
Revision ID: 0001
Revises: 
Create Date: 2026-12-02 14:56:36.525518
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:

    op.create_table('events',
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('type', sa.String(length=48), nullable=False),
    sa.Column('data', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('session_id', 'seq'),
    schema='helix'
    )
    op.create_table('sessions',
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('agent_name', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('current_run_id', sa.String(length=64), nullable=True),
    sa.Column('version', sa.Integer(), server_default='0', nullable=False),
    sa.Column('event_seq', sa.Integer(), server_default='0', nullable=False),
    sa.Column('run_count', sa.Integer(), server_default='0', nullable=False),
    sa.Column('parent_dispatch_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('session_id'),
    schema='helix'
    )
    op.create_table('stops',
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('requested_by', sa.String(length=200), nullable=True),
    sa.Column('requested_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id'),
    schema='helix'
    )
    op.create_table('usage',
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('model_name', sa.String(length=200), nullable=True),
    sa.Column('input_tokens', sa.Integer(), server_default='0', nullable=False),
    sa.Column('output_tokens', sa.Integer(), server_default='0', nullable=False),
    sa.Column('total_tokens', sa.Integer(), server_default='0', nullable=False),
    sa.Column('details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id', 'step'),
    schema='helix'
    )
    op.create_index('ix_usage_session', 'usage', ['session_id'], unique=False, schema='helix')
    op.create_table('calls',
    sa.Column('dispatch_id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('checkpoint_id', sa.String(length=80), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('tool_call_id', sa.String(length=200), nullable=True),
    sa.Column('tool_name', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('args', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('replay', sa.String(length=8), nullable=False),
    sa.Column('concurrency_group', sa.String(length=200), nullable=True),
    sa.Column('sequential', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('requires_approval', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('result', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('error', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('outcome_note', sa.Text(), nullable=True),
    sa.Column('paired_by', sa.String(length=16), nullable=True),
    sa.Column('settled_run_id', sa.String(length=64), nullable=True),
    sa.Column('approved', sa.Boolean(), nullable=True),
    sa.Column('approval_reason', sa.Text(), nullable=True),
    sa.Column('approval_actor', sa.String(length=200), nullable=True),
    sa.Column('answered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('child_session_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['session_id'], ['helix.sessions.session_id'], ),
    sa.PrimaryKeyConstraint('dispatch_id'),
    sa.UniqueConstraint('checkpoint_id', 'position', name='uq_calls_checkpoint_position'),
    schema='helix'
    )
    op.create_index('ix_calls_run', 'calls', ['run_id'], unique=False, schema='helix')
    op.create_index('ix_calls_session', 'calls', ['session_id'], unique=False, schema='helix')
    op.create_index('ix_calls_status', 'calls', ['status'], unique=False, schema='helix')
    op.create_table('checkpoints',
    sa.Column('checkpoint_id', sa.String(length=80), nullable=False),
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('message_seq', sa.Integer(), nullable=False),
    sa.Column('superseded_by', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['helix.sessions.session_id'], ),
    sa.PrimaryKeyConstraint('checkpoint_id'),
    sa.UniqueConstraint('run_id', 'step', 'kind', name='uq_checkpoints_run_step_kind'),
    schema='helix'
    )
    op.create_index('ix_checkpoints_session', 'checkpoints', ['session_id', 'step'], unique=False, schema='helix')
    op.create_table('messages',
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('step', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('body', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('superseded_by', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['helix.sessions.session_id'], ),
    sa.PrimaryKeyConstraint('session_id', 'seq'),
    schema='helix'
    )
    op.create_table('runs',
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=64), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('agent_name', sa.String(length=200), nullable=False),
    sa.Column('entry', sa.String(length=32), nullable=False),
    sa.Column('entry_message', sa.Text(), nullable=True),
    sa.Column('checkpoint_id', sa.String(length=80), nullable=True),
    sa.Column('previous_run_id', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('output', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('steps', sa.Integer(), server_default='0', nullable=False),
    sa.Column('max_steps', sa.Integer(), nullable=False),
    sa.Column('recovery', sa.String(length=16), server_default='full', nullable=False),
    sa.Column('executor_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['session_id'], ['helix.sessions.session_id'], ),
    sa.PrimaryKeyConstraint('run_id'),
    sa.UniqueConstraint('session_id', 'seq', name='uq_runs_session_seq'),
    schema='helix'
    )
    op.create_index('ix_runs_session', 'runs', ['session_id'], unique=False, schema='helix')
    op.create_table('attempts',
    sa.Column('dispatch_id', sa.String(length=64), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('executor_id', sa.String(length=128), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=True),
    sa.ForeignKeyConstraint(['dispatch_id'], ['helix.calls.dispatch_id'], ),
    sa.PrimaryKeyConstraint('dispatch_id', 'attempt'),
    schema='helix'
    )



def downgrade() -> None:

    op.drop_table('attempts', schema='helix')
    op.drop_index('ix_runs_session', table_name='runs', schema='helix')
    op.drop_table('runs', schema='helix')
    op.drop_table('messages', schema='helix')
    op.drop_index('ix_checkpoints_session', table_name='checkpoints', schema='helix')
    op.drop_table('checkpoints', schema='helix')
    op.drop_index('ix_calls_status', table_name='calls', schema='helix')
    op.drop_index('ix_calls_session', table_name='calls', schema='helix')
    op.drop_index('ix_calls_run', table_name='calls', schema='helix')
    op.drop_table('calls', schema='helix')
    op.drop_index('ix_usage_session', table_name='usage', schema='helix')
    op.drop_table('usage', schema='helix')
    op.drop_table('stops', schema='helix')
    op.drop_table('sessions', schema='helix')
    op.drop_table('events', schema='helix')

