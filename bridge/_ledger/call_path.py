"""The call path's statements: the writes a bridged ``tools/call`` commits on its critical
path (the intent, then the handle or the result, each with its event), defined once as
SQLAlchemy Core statements over the SQLModel tables and compiled once for the ledger's driver
session (:mod:`bridge._ledger.commit.driver_sessions`). :mod:`bridge._ledger.dispatches` runs them.

The two call-path events (``call.result``, ``task.created``) are serialised by one function,
:func:`event_tail`, in the shape ``model_dump`` gives them; ``tests/test_ledger_write_paths.py``
proves the rows and events equal those of the SQLAlchemy Core path and of the event models.
"""

from __future__ import annotations

import json
from binascii import b2a_base64
from os import urandom
from typing import Any

import pydantic_core
from sqlalchemy import (
    Select,
    String,
    Update,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)

from bridge import events as ev
from bridge._ids import DISPATCH_PREFIX, sha256_hex
from bridge._ledger._base import (
    DISPATCHES,
    EVENTS,
    RUNS,
    TASKS,
    bind_columns,
    guard_only,
    written_columns,
)
from bridge._ledger.commit.commit_signals import CHANNEL
from bridge._ledger.commit.driver_sessions import (
    CompiledStatement,
    DriverSession,
)
from bridge._ledger.fencing import Membership
from bridge._lifecycle import CallState

# The encoding of bridge._ids.canonical_json, with the encoder built once for the call path
# (json.dumps builds a new one per call): same arguments, same text, same digests.
CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64 -> base64url, as secrets.token_urlsafe
# The two events a bridged call appends on its own commits.
RESULT_EVENT: str = ev.CallResult.model_fields["type"].default
TASK_CREATED_EVENT: str = ev.TaskCreated.model_fields["type"].default


def event_tail(event: dict[str, Any]) -> str:
    """A call-path event's JSON after its leading ``{"seq":<n>`` (the sequence is known only
    inside the transaction, in SQL or from the run's counter).

    ``event`` is the event as ``model_dump`` gives it, ``run_ref`` and ``at_ms`` first, minus
    ``seq``. Its fields come from the ledger's own rows and typed arguments, so the event is
    not built as a model and validated again: pydantic's own encoder serialises it, and it reads
    back (``parse_event``) as the model would have written it.
    """
    return "," + pydantic_core.to_json(event)[1:].decode()


def intent_row(
    principal: str,
    now: int,
    run_ref: str,
    server_endpoint: str,
    tool_name: str,
    arguments: Any,
    server_name: str | None,
    operation_id: str | None,
    sent: bool,
    trace_id: str | None,
    span_id: str | None,
    dispatcher: Membership | None,
) -> dict[str, Any]:
    """The intent's row (``now``: the ledger clock's time)."""
    # = digest_arguments(arguments), without building a JSON encoder per call
    args_digest = sha256_hex(
        CANONICAL.encode(arguments if arguments is not None else {}).encode("utf-8")
    )
    # = new_ref(DISPATCH_PREFIX), in C calls only: 128 random bits, base64url, no padding
    ref = DISPATCH_PREFIX + (
        b2a_base64(urandom(16), newline=False).translate(URLSAFE).rstrip(b"=").decode()
    )
    state = CallState.SENT if sent else CallState.PENDING
    return {
        "ref": ref,
        "principal": principal,
        "run_ref": run_ref,
        "operation_id": operation_id or ref,
        "server_endpoint": server_endpoint,
        "server_name": server_name,
        "tool_name": tool_name,
        "args_digest": args_digest,
        "state": state.value,
        "unknown_reason": None,
        "result_json": None,
        "result_truncated": False,
        "task_ref": None,
        "trace_id": trace_id,
        "span_id": span_id,
        "dispatcher_replica": dispatcher.replica_id if dispatcher is not None else None,
        "dispatcher_incarnation": dispatcher.incarnation if dispatcher is not None else None,
        "created_at_ms": now,
        "updated_at_ms": now,
        "resolved_at_ms": None,
    }


class CallPathStatements:
    """The statements of the two write-ahead commits, compiled once per dialect."""

    def __init__(self, session: DriverSession) -> None:
        compile_ = session.compile
        # The intent (an event) is written only if the run exists for this principal. An
        # UPDATE's own guards are bound under names no column of its table has ("owner",
        # "in_run"): SQLAlchemy Core reserves column names for the SET clause.
        owned_run = (RUNS.c.ref == bindparam("run_ref")) & (
            RUNS.c.principal == bindparam("principal")
        )
        run_of_owner = (RUNS.c.ref == bindparam("run_ref")) & (
            RUNS.c.principal == bindparam("owner")
        )
        dispatch_columns = written_columns(DISPATCHES)
        source = select(
            *[b.label(c) for c, b in bind_columns(DISPATCHES, dispatch_columns).items()]
        )
        self.insert_dispatch = compile_(
            insert(DISPATCHES).from_select(dispatch_columns, source.where(owned_run))
        )
        # One guarded state move for every dispatch transition on the call path.
        move = update(DISPATCHES).values(
            state=bindparam("to_state"),
            updated_at_ms=bindparam("now"),
            result_json=bindparam("result_json"),
            result_truncated=bindparam("result_truncated"),
            task_ref=bindparam("task_ref"),
        )
        guard = (
            DISPATCHES.c.ref == bindparam("op_ref"),
            DISPATCHES.c.principal == bindparam("owner"),
            DISPATCHES.c.state == bindparam("from_state"),
        )
        self.advance_dispatch = compile_(move.where(*guard).returning(*DISPATCHES.c))
        # The same move when the caller holds the dispatch it began (no row to return): also
        # guarded on the run, so the event it appends cannot go to another run's log. The run
        # is checked on the row the primary key found, never used to find it: PostgreSQL's
        # generic plan (a prepared statement, statistics of a long history where most runs
        # hold one call) rates the run's index as good as the key, and then walks every call
        # of a busy run on each commit.
        in_run = guard_only(DISPATCHES.c.run_ref) == bindparam("in_run")
        self.advance_known_dispatch = compile_(move.where(*guard, in_run))
        # The run's next event number, and the outer ids a new task is linked to.
        self.next_seq = compile_(
            update(RUNS)
            .where(run_of_owner)
            .values(event_seq=RUNS.c.event_seq + literal_column("1"))
            .returning(RUNS.c.event_seq, RUNS.c.response_id, RUNS.c.session_id)
        )
        self.insert_task = compile_(
            insert(TASKS).values(bind_columns(TASKS, written_columns(TASKS)))
        )
        event_columns = written_columns(EVENTS)
        self.insert_event = compile_(insert(EVENTS).values(bind_columns(EVENTS, event_columns)))
        # The same append without reading the number back (RETURNING costs SQLite more than
        # the statement it is on): the counter moves, then the event is written at the new
        # value, its payload completed in SQL: '{"seq":' || seq || <event_tail>.
        self.bump_seq = compile_(
            update(RUNS)
            .where(run_of_owner)
            .values(event_seq=RUNS.c.event_seq + literal_column("1"))
        )
        from_run = {
            "seq": RUNS.c.event_seq,
            "payload_json": literal_column("""'{"seq":'""", String)
            + cast(RUNS.c.event_seq, String)
            + bindparam("payload_tail", type_=String),
        }
        bound = bind_columns(EVENTS, [c for c in event_columns if c not in from_run])
        at_seq = select(
            *[(from_run[c] if c in from_run else bound[c]).label(c) for c in event_columns]
        )
        self.insert_event_at_seq = compile_(
            insert(EVENTS).from_select(event_columns, at_seq.where(owned_run))
        )
        self.run_seq = compile_(select(RUNS.c.event_seq).where(run_of_owner))
        # PostgreSQL: the same read, announcing the commit to other processes from inside the
        # transaction (NOTIFY is delivered at commit, only if it commits): the publisher's
        # transaction of its own after each commit (notify.CommitPublisher) is saved.
        self.announced_seq: CompiledStatement | None = None
        self.announce: CompiledStatement | None = None  # the same, the number already known
        # PostgreSQL: the result commit's three statements (and the announcement) as one, so
        # that a group commit's batch is one round trip per write (see result_in_one).
        self.result_in_one: CompiledStatement | None = None
        self.result_in_one_announced: CompiledStatement | None = None
        if session.dialect.name == "postgresql":
            known_move = move.where(*guard, in_run)
            self.result_in_one = compile_(result_in_one(known_move, event_columns, None))
            self.result_in_one_announced = compile_(
                result_in_one(known_move, event_columns, CHANNEL)
            )
            payload = RUNS.c.ref + literal_column("' '", String) + cast(RUNS.c.event_seq, String)
            channel = literal_column(f"'{CHANNEL}'", String)  # a constant: no quote inside
            self.announced_seq = compile_(
                select(RUNS.c.event_seq, func.pg_notify(channel, payload)).where(run_of_owner)
            )
            self.announce = compile_(
                select(func.pg_notify(channel, bindparam("payload", type_=String)))
            )


def result_in_one(move: Update, event_columns: list[str], channel: str | None) -> Select[Any]:
    """One PostgreSQL statement for the result commit: the guarded dispatch move, then (only if
    it moved) the run's event counter, the event written at the new number, and, with a
    ``channel``, the commit announced (NOTIFY is delivered at commit). Data-modifying CTEs run
    once each, on one snapshot; each later one reads the earlier one's RETURNING. The row says
    what happened: ``moved`` (0 or 1) and ``seq`` (NULL: no such run of this principal)."""
    # Every value is bound under a name no column of the three tables has, or one the move
    # already sets: executed through Core, a parameter named like a column of an UPDATE's
    # table would be added to its SET clause.
    moved = move.returning(DISPATCHES.c.ref).cte("moved")
    run_of_owner = (RUNS.c.ref == bindparam("in_run")) & (RUNS.c.principal == bindparam("owner"))
    bumped = (
        update(RUNS)
        .where(run_of_owner, exists(select(moved.c.ref)))
        .values(event_seq=RUNS.c.event_seq + literal_column("1"))
        .returning(RUNS.c.ref, RUNS.c.event_seq)
        .cte("bumped")
    )
    sources: dict[str, Any] = {
        "principal": bindparam("owner", type_=EVENTS.c.principal.type),
        "run_ref": bindparam("in_run", type_=EVENTS.c.run_ref.type),
        "seq": bumped.c.event_seq,
        "type": bindparam("event_type", type_=EVENTS.c.type.type),
        "task_ref": null(),  # a call's result belongs to no task
        "payload_json": literal_column("""'{"seq":'""", String)
        + cast(bumped.c.event_seq, String)
        + bindparam("payload_tail", type_=String),
        "at_ms": bindparam("now", type_=EVENTS.c.at_ms.type),
    }
    logged = (
        insert(EVENTS)
        .from_select(
            event_columns,
            select(*[sources[c].label(c) for c in event_columns]).select_from(bumped),
        )
        .cte("logged")
    )
    columns: list[Any] = [
        select(func.count()).select_from(moved).scalar_subquery().label("moved"),
        select(bumped.c.event_seq).scalar_subquery().label("seq"),
    ]
    if channel is not None:
        payload = bumped.c.ref + literal_column("' '", String) + cast(bumped.c.event_seq, String)
        notified = select(
            func.pg_notify(literal_column(f"'{channel}'", String), payload).label("sent")
        ).select_from(bumped)
        columns.append(select(func.count()).select_from(notified.subquery()).scalar_subquery())
    return select(*columns).add_cte(logged)
