"""The web console's parts on their own: the escaping renderer, forms from a JSON schema,
console tokens, signed sessions, CSRF tokens and the cross-site check (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.requests import Request

from bridge._answers import coerce_texts
from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.views import AttentionItem, TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from bridge.cli._records import load_snapshot
from bridge.cli._timeline import build_timeline
from bridge.console._auth import (
    ConsoleAuthError,
    ConsoleTokens,
    SessionSigner,
    token_digest,
)
from bridge.console._csrf import cross_origin_reason
from bridge.console._forms import form_fields, posted_values, render_fields
from bridge.console._inbox import inbox_page
from bridge.console._live import resume_point
from bridge.console._markup import Markup, attrs, html, join
from bridge.console._pages import Frame, RunRow, runs_page
from bridge.console._run_page import run_page
from tests.support.builders import new_run, new_task

HOSTILE = '<script>alert("x")</script>&\'"'


# -- renderer -------------------------------------------------------------------------------
def test_html_escapes_every_value_and_keeps_rendered_markup() -> None:
    inner = html("<b>{}</b>", HOSTILE)
    page = html("<p title='{}'>{}</p>", HOSTILE, inner)
    assert "<script>" not in page
    assert "&lt;script&gt;" in page and "&#34;" in page and "&#39;" in page
    assert "<b>&lt;script" in page  # the rendered inner part is not escaped twice


def test_join_escapes_plain_strings_and_attrs_writes_only_set_ones() -> None:
    assert join([HOSTILE, Markup("<i>ok</i>")]) == Markup(
        "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#39;&#34;<i>ok</i>"
    )
    rendered = attrs(class_="a", data_field='x"y', checked=True, selected=False, title=None)
    assert rendered == Markup(' class="a" data-field="x&#34;y" checked')


# -- forms ----------------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "true pays"},
        "amount": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "note": {"type": "string", "description": HOSTILE},
        "email": {"type": "string", "format": "email"},
        "tier": {"type": "string", "enum": ["gold", "silver"], "enumNames": ["Gold", "Silver"]},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l"}]},
        "tags": {"type": "array"},
    },
    "required": ["approve", "amount"],
}


def test_form_fields_follow_the_schema() -> None:
    fields = {f.name: f for f in form_fields(SCHEMA)}
    assert [f.name for f in form_fields(SCHEMA)] == list(SCHEMA["properties"])  # type: ignore[call-overload]
    assert fields["approve"].kind == "boolean" and fields["approve"].required
    assert fields["amount"].kind == "integer" and fields["amount"].required
    assert fields["ratio"].kind == "number" and not fields["ratio"].required
    assert fields["email"].input_type == "email"
    assert [(c.value, c.label) for c in fields["tier"].choices] == [
        ("gold", "Gold"),
        ("silver", "Silver"),
    ]
    assert [(c.value, c.label) for c in fields["size"].choices] == [("s", "Small"), ("l", "l")]
    assert fields["tags"].kind == "unsupported"
    assert form_fields(None) == [] and form_fields({"type": "object"}) == []


def test_rendered_fields_escape_server_text_and_show_errors_and_values() -> None:
    fields = form_fields(SCHEMA)
    page = render_fields(
        fields,
        values={"approve": "false", "amount": "12x", "tier": "silver"},
        errors={"amount": "not an integer: '12x'"},
        id_prefix="in-1",
    )
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert 'name="f.approve" value="false" checked' in page
    assert 'name="f.amount" value="12x"' in page and 'aria-invalid="true"' in page
    assert 'data-field-error="amount">not an integer: &#39;12x&#39;</div>' in page
    assert '<option value="silver" selected>Silver</option>' in page
    assert page.count('class="required"') == 2


def test_defaults_fill_a_fresh_form() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}
    assert 'value="3"' in render_fields(form_fields(schema), id_prefix="x")


def test_posted_values_keep_given_fields_only() -> None:
    fields = form_fields(SCHEMA)
    form = {"f.approve": "true", "f.amount": " 7 ", "f.note": "  spaced  ", "f.ratio": "", "x": "1"}
    assert posted_values(fields, form) == {"approve": "true", "amount": "7", "note": "  spaced  "}


def test_posted_texts_become_the_schemas_types_or_a_field_message() -> None:
    good = {"approve": "false", "amount": "7", "ratio": "0.5", "tier": "gold", "size": "s"}
    assert coerce_texts(SCHEMA, good) == (
        {"approve": False, "amount": 7, "ratio": 0.5, "tier": "gold", "size": "s"},
        {},
    )
    content, errors = coerce_texts(
        SCHEMA, {"approve": "maybe", "amount": "12x", "ratio": "nan", "tier": "bronze"}
    )
    assert content == {}
    assert set(errors) == {"approve", "amount", "ratio", "tier"}
    assert "12x" in errors["amount"] and "choices" in errors["tier"]
    assert coerce_texts(SCHEMA, {})[1] == {
        "approve": "required: give a value",
        "amount": "required: give a value",
    }
    numbers = {"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 2]}}}
    assert coerce_texts(numbers, {"n": "2"}) == ({"n": 2}, {})


# -- tokens and sessions ----------------------------------------------------------------------
def test_tokens_from_file_and_env(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"principals": {"acme": {"token_sha256": token_digest("s1")}}}))
    tokens = ConsoleTokens.from_file(path)
    assert tokens.principal("s1") == "acme"
    assert tokens.principal("s2") is None and tokens.principal("") is None
    env = ConsoleTokens.from_env("acme=s1, globex=s2")
    assert env.principals == ("acme", "globex") and env.principal("s2") == "globex"


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"principals": []}),
        json.dumps({"principals": {"acme": {"token_sha256": "short"}}}),
        json.dumps({"principals": {}}),
        json.dumps(
            {"principals": {"a": {"token_sha256": "0" * 64}, "b": {"token_sha256": "0" * 64}}}
        ),
    ],
)
def test_bad_tokens_files_are_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ConsoleAuthError):
        ConsoleTokens.from_file(path)


def test_bad_tokens_env_is_refused() -> None:
    with pytest.raises(ConsoleAuthError):
        ConsoleTokens.from_env("acme")


def test_a_session_cookie_proves_its_principal_until_it_expires() -> None:
    signer = SessionSigner(b"k" * 32, ttl_s=60)
    cookie = signer.issue("acme", now=1000)
    session = signer.read(cookie, now=1030)
    assert session is not None and session.principal == "acme" and session.via_cookie
    assert signer.read(cookie, now=1061) is None  # expired
    assert SessionSigner(b"x" * 32).read(cookie, now=1030) is None  # another key
    payload, mac = cookie.split(".")
    forged = payload.replace(payload[5], "A" if payload[5] != "A" else "B") + "." + mac
    assert signer.read(forged, now=1030) is None
    assert signer.read(None) is None and signer.read("garbage") is None


def test_csrf_tokens_are_per_session() -> None:
    signer = SessionSigner(b"k" * 32)
    one = signer.read(signer.issue("acme"))
    two = signer.read(signer.issue("acme"))
    assert one is not None and two is not None
    assert signer.csrf_valid(one, signer.csrf_token(one))
    assert not signer.csrf_valid(one, signer.csrf_token(two))
    assert not signer.csrf_valid(one, None) and not signer.csrf_valid(one, "")
    bearer = signer.bearer_session("acme", "s1")
    assert signer.csrf_token(bearer) == signer.csrf_token(signer.bearer_session("acme", "s1"))


# -- cross-site check, resume point --------------------------------------------------------
def _request(headers: dict[str, str]) -> Request:
    raw = [
        (k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8780", **headers}.items()
    ]
    scope = {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/x",
        "query_string": b"",
        "headers": raw,
        "server": ("127.0.0.1", 8780),
    }
    return Request(scope)


def test_cross_site_posts_are_recognised() -> None:
    assert cross_origin_reason(_request({})) is None
    same = {"origin": "http://127.0.0.1:8780", "sec-fetch-site": "same-origin"}
    assert cross_origin_reason(_request(same)) is None
    assert cross_origin_reason(_request({"origin": "http://evil.example"})) is not None
    assert cross_origin_reason(_request({"sec-fetch-site": "cross-site"})) is not None
    assert cross_origin_reason(_request({"sec-fetch-site": "same-site"})) is not None
    assert cross_origin_reason(_request({"origin": "null"})) is not None
    # A browser's Sec-Fetch-Site decides over an Origin it nulled (a referrer policy).
    assert (
        cross_origin_reason(_request({"origin": "null", "sec-fetch-site": "same-origin"})) is None
    )


def test_resume_point() -> None:
    assert resume_point(None, None) == 0
    assert resume_point("4", None) == 4
    assert resume_point("4", "9") == 9
    assert resume_point("x", "-3") == 0


# -- pages ------------------------------------------------------------------------------------
def test_pages_escape_what_servers_and_callers_wrote(sqlite_ledger: Ledger) -> None:
    tenant = sqlite_ledger.for_principal("acme")
    run = new_run(tenant, response_id="resp_<b>x</b>")
    raw = "raw-task-id-" + "9f" * 10
    task = new_task(tenant, run.ref, task_id=raw, tool="<script>alert(1)</script>")
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.WORKING, status_message=f"{HOSTILE} on {raw}")
    )
    snapshot = load_snapshot(LedgerReader(sqlite_ledger, "acme"), run.ref)
    frame = Frame("acme", "csrf-value")
    page = run_page(snapshot, build_timeline(snapshot), frame)
    rows = runs_page(frame, [RunRow(snapshot.run, 1, 1, 0)], query=HOSTILE, status="any", scanned=1)
    for text in (page, rows):
        assert "<script>" not in text and "<b>x</b>" not in text
    assert raw not in page and f"[{task.ref}]" in page  # a raw id in server text is redacted
    assert 'name="csrf" value="csrf-value"' in page


def test_the_inbox_escapes_request_text() -> None:
    item = AttentionItem(
        kind="input_waiting",
        ref="in_1",
        principal="acme",
        run_ref="run_1",
        response_id="resp_1",
        since_ms=0,
        summary=HOSTILE,
        next_step="answer",
        task_ref="tk_1",
        question=HOSTILE,
        fields=("ok",),
        requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
    )
    page = inbox_page(Frame("acme", "t"), [item])
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert 'action="/runs/run_1/inputs/tk_1/in_1/answer"' in page
    assert "response resp_1" in page  # the response, not a hard-coded dash


def test_the_inbox_has_a_card_with_its_action_for_every_kind() -> None:
    def item(kind: str, ref: str, **more: object) -> AttentionItem:
        return AttentionItem(
            kind=kind,  # type: ignore[arg-type]
            ref=ref,
            principal="acme",
            run_ref="run_1",
            response_id="resp_1",
            since_ms=0,
            summary=kind,
            next_step="act",
            **more,  # type: ignore[arg-type]
        )

    items = [
        item("input_overdue", "in_2", task_ref="tk_2", question="Approve?"),
        item("unknown_outcome", "op_1", op_ref="op_1"),
        item("lost_task", "tk_3", task_ref="tk_3"),
        item("anomaly", "run_1:7"),
        item("orphaned_run", "run_1"),
    ]
    page = inbox_page(Frame("acme", "t"), items)
    for kind in ("input_overdue", "unknown_outcome", "lost_task", "anomaly", "orphaned_run"):
        assert f'data-kind="{kind}"' in page
    assert 'action="/runs/run_1/inputs/tk_2/in_2/answer"' in page and "Approve?" in page
    assert 'action="/runs/run_1/calls/op_1/resolve"' in page
    assert page.count('action="/runs/run_1/acknowledge"') == 2
    assert 'value="tk_3"' in page and 'value="run_1:7"' in page
    assert 'action="/runs/run_1/close"' in page and 'name="reason"' in page
    assert "Nothing waits" in inbox_page(Frame("acme", "t"), [])
