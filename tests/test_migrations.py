"""Alembic migrations build the whole schema from an empty database, on both backends."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.schema import migrate
from bridge._ledger.schema.engine import create_ledger_engine
from bridge._ledger.schema.models import ALL_TABLES
from bridge._ledger.store import Ledger
from bridge._lifecycle import Admission, LostReason
from tests.support.builders import ENDPOINT, new_run, new_task
from tests.support.imports import packages_loaded_by

TABLES = {model.__tablename__ for model in ALL_TABLES}  # type: ignore[attr-defined]


def test_upgrade_from_empty_matches_the_models(db_url: str) -> None:
    engine = create_ledger_engine(db_url)
    try:
        assert migrate.current_revision(engine) is None
        assert not TABLES & set(inspect(engine).get_table_names())
        migrate.upgrade(engine)
        head = migrate.head_revision()
        assert head is not None and migrate.current_revision(engine) == head
        assert set(inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"compare_type": True, "version_table": "bridge_alembic_version"},
            )
            diff = compare_metadata(context, SQLModel.metadata)
        assert diff == [], f"models and migrations disagree: {diff}"
        migrate.upgrade(engine)  # idempotent at head
    finally:
        engine.dispose()


def test_downgrade_to_base_and_back(db_url: str) -> None:
    engine = create_ledger_engine(db_url)
    try:
        migrate.upgrade(engine)
        migrate.downgrade(engine, "base")
        assert not TABLES & set(inspect(engine).get_table_names())
        migrate.upgrade(engine)
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_the_head_revision_constant_is_the_migrations_head() -> None:
    """A ledger at ``HEAD_REVISION`` opens without Alembic: the constant must follow every
    migration added."""
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_a_ledger_at_head_opens_without_loading_alembic(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    Ledger.open(db).close()  # created and migrated (Alembic runs here)
    code = f"from bridge._ledger.store import Ledger\nLedger.open({str(db)!r}).close()"
    assert packages_loaded_by(code, ["alembic"]) == []


def test_a_ledger_behind_head_is_still_migrated(db_url: str) -> None:
    engine = create_ledger_engine(db_url)
    try:
        migrate.upgrade(engine, "0009_agent_states")
        assert migrate.current_revision(engine) == "0009_agent_states"
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.HEAD_REVISION
    finally:
        engine.dispose()


def test_resolved_work_is_set_from_the_events_already_recorded(db_url: str) -> None:
    """0015 puts the verdicts and acknowledgements a ledger already holds (as events) on their
    rows: a resolved call and an acknowledged lost task leave the attention list after the
    upgrade as they did before it; an unresolved call and an unacknowledged task stay."""
    ledger = Ledger.open(db_url)
    try:
        tenant = ledger.for_principal("acme")
        run = new_run(tenant)
        calls = []
        for _ in range(2):
            op = tenant.calls.begin_dispatch(
                run.ref, server_endpoint=ENDPOINT, server_name="s", tool_name="t", arguments={}
            )
            tenant.calls.mark_dispatch_sent(op.ref)
            tenant.calls.mark_dispatch_unknown(op.ref, "no reply")
            calls.append(op.ref)
        tenant.calls.record_admission(calls[0], Admission.ADMITTED, "host")
        tenant.calls.record_admission(calls[1], Admission.UNKNOWN, "hook")
        tasks = [new_task(tenant, run.ref).ref for _ in range(2)]
        for ref in tasks:
            tenant.tasks.mark_task_lost(ref, LostReason.NOT_FOUND, "gone")
        tenant.operator.acknowledge(tasks[0], by="ops")
        migrate.downgrade(ledger.engine, "0014_attention_indexes")
        assert "resolved_at_ms" not in {
            c["name"] for c in inspect(ledger.engine).get_columns("bridge_dispatch_intents")
        }
        migrate.upgrade(ledger.engine)
        with ledger.engine.connect() as conn:
            resolved = dict(
                conn.exec_driver_sql(
                    "SELECT ref, resolved_at_ms FROM bridge_dispatch_intents"
                ).all()
            )
            acknowledged = dict(
                conn.exec_driver_sql("SELECT ref, acknowledged_at_ms FROM bridge_inner_tasks").all()
            )
        assert resolved[calls[0]] is not None and resolved[calls[1]] is None
        assert acknowledged[tasks[0]] is not None and acknowledged[tasks[1]] is None
        window = AttentionWindow(now_ms=ledger.clock())
        waiting = {item.ref for item in tenant.attention.attention(window)}
        assert waiting == {calls[1], tasks[1]}
    finally:
        ledger.close()
