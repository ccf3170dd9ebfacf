"""The console's Starlette app: authentication, CSRF, the routes and what each answers.

Every route but the login form and the static files needs a principal: a session cookie of a
login, or ``Authorization: Bearer <token>``. A page asked for without one redirects to the
login form; anything else gets ``401``. Every POST is checked before its form is used: it must
not come from another site (:mod:`bridge.console._csrf`) and must carry the session's CSRF
token; otherwise ``403`` and nothing is done. A reference of another principal (or none)
answers ``404``, as the ledger does.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge._errors import InvalidTransition, NotFound
from bridge._facade import Bridge
from bridge.console._actions import ConsoleActions
from bridge.console._auth import SESSION_COOKIE, ConsoleTokens, Session, SessionSigner
from bridge.console._csrf import cross_origin_reason
from bridge.console._live import resume_point, timeline_updates
from bridge.console._pages import Frame, login_page, message_page, runs_page
from bridge.console._reads import RunsQuery, matching_runs, run_snapshot
from bridge.console._run_page import run_page
from bridge.console._static import CONSOLE_CSS, CONSOLE_JS

log = logging.getLogger("bridge.console")

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it a browser sends "Origin: null" even on same-origin POSTs.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """ASGI wrapper: every response carries the headers above (a strict CSP: this console's
    own script and stylesheet only, no inline script, no framing)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


Handler = Callable[[Request, Frame], Awaitable[Response]]


class Console:
    """The console over one open bridge."""

    def __init__(
        self,
        bridge: Bridge,
        tokens: ConsoleTokens,
        signer: SessionSigner,
        thresholds: Mapping[str, float] | None = None,
    ) -> None:
        self.bridge = bridge
        self.tokens = tokens
        self.signer = signer
        self.actions = ConsoleActions(bridge, **(thresholds or {}))

    # -- who is asking -------------------------------------------------------------------
    def session(self, request: Request) -> Session | None:
        """The caller's session: a known bearer token, else a valid session cookie."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            principal = self.tokens.principal(token.strip())
            return self.signer.bearer_session(principal, token.strip()) if principal else None
        session = self.signer.read(request.cookies.get(SESSION_COOKIE))
        if session is not None and session.principal not in self.tokens.principals:
            return None
        return session

    def frame(self, session: Session) -> Frame:
        """What every page of this session carries."""
        return Frame(session.principal, self.signer.csrf_token(session))

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A GET route for a signed-in principal (others are sent to the login form)."""

        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            if session is None:
                if request.headers.get("accept", "").startswith("text/event-stream"):
                    return Response("sign in first", status_code=401)
                return RedirectResponse("/login", status_code=303)
            return await self._guarded(handler, request, self.frame(session))

        return endpoint

    def action(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A POST route: same-site, signed in, and carrying the session's CSRF token."""

        async def endpoint(request: Request) -> Response:
            reason = cross_origin_reason(request)
            if reason is not None:
                return self._refused(None, 403, f"Refused: {reason}.")
            session = self.session(request)
            if session is None:
                return self._refused(None, 401, "Sign in first.")
            form = await request.form()
            if not self.signer.csrf_valid(session, _text(form, "csrf")):
                return self._refused(
                    self.frame(session), 403, "Refused: the form's CSRF token is missing or wrong."
                )
            request.state.form = form
            return await self._guarded(handler, request, self.frame(session))

        return endpoint

    async def _guarded(self, handler: Handler, request: Request, frame: Frame) -> Response:
        try:
            return await handler(request, frame)
        except NotFound as exc:
            return self._refused(frame, 404, f"No {exc.kind} {exc.ref} for {frame.principal}.")
        except InvalidTransition as exc:  # e.g. a verdict given twice: nothing was written
            return self._refused(frame, 409, f"Not done: {exc}.")

    def _refused(self, frame: Frame | None, status: int, text: str) -> Response:
        titles = {401: "Not signed in", 403: "Refused", 404: "Not found", 409: "Already done"}
        title = titles.get(status, "Error")
        return HTMLResponse(message_page(frame, title, text), status_code=status)

    # -- sign in and out -----------------------------------------------------------------
    async def login_form(self, request: Request) -> Response:
        """``GET /login``."""
        return HTMLResponse(login_page())

    async def login(self, request: Request) -> Response:
        """``POST /login``: a valid token gets a session cookie (the token is not kept)."""
        reason = cross_origin_reason(request)
        if reason is not None:
            return self._refused(None, 403, f"Refused: {reason}.")
        form = await request.form()
        principal = self.tokens.principal((_text(form, "token") or "").strip())
        if principal is None:
            log.info("console sign-in refused (unknown token)")
            return HTMLResponse(login_page("That token is not known."), status_code=401)
        log.info("console sign-in: principal %s", principal)
        response = RedirectResponse("/inbox", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.signer.issue(principal),
            max_age=self.signer.ttl_s,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(self, request: Request, frame: Frame) -> Response:
        """``POST /logout``."""
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # -- pages ---------------------------------------------------------------------------
    async def runs(self, request: Request, frame: Frame) -> Response:
        """``GET /runs?q=&status=``."""
        query = RunsQuery(
            text=request.query_params.get("q", "")[:200],
            status=request.query_params.get("status", "any"),
        )
        items = await self.actions.items(frame.principal)
        waiting = Counter(item.run_ref for item in items)  # the attention column
        rows, scanned = await matching_runs(self.bridge, frame.principal, query, waiting)
        frame = replace(frame, attention_count=len(items))
        return HTMLResponse(
            runs_page(frame, rows, query=query.text, status=query.status, scanned=scanned)
        )

    async def run(self, request: Request, frame: Frame) -> Response:
        """``GET /runs/{run_ref}``."""
        snapshot, timeline = await run_snapshot(
            self.bridge, frame.principal, request.path_params["run_ref"]
        )
        frame = await self.actions.with_count(frame)
        flash = _confirmation(request.query_params)
        return HTMLResponse(run_page(snapshot, timeline, frame, flash=flash))

    async def stream(self, request: Request, frame: Frame) -> Response:
        """``GET /runs/{run_ref}/stream``: the live area over SSE."""
        run_ref = request.path_params["run_ref"]
        await self.bridge.run(frame.principal, run_ref).view()  # NotFound before streaming
        after = resume_point(
            request.query_params.get("after"), request.headers.get("last-event-id")
        )
        return EventSourceResponse(
            timeline_updates(self.bridge, frame, run_ref, after, self.actions.waiting),
            ping=15,
            send_timeout=30,
        )

    async def inbox(self, request: Request, frame: Frame) -> Response:
        """``GET /inbox``."""
        return await self.actions.inbox(frame, flash=_confirmation(request.query_params))

    # -- actions -------------------------------------------------------------------------
    async def answer(self, request: Request, frame: Frame) -> Response:
        """``POST /runs/{run_ref}/inputs/{owner_ref}/{input_ref}/answer``."""
        p = request.path_params
        form: FormData = request.state.form
        return await self.actions.answer(frame, p["run_ref"], p["owner_ref"], p["input_ref"], form)

    async def cancel(self, request: Request, frame: Frame) -> Response:
        """``POST /runs/{run_ref}/tasks/{task_ref}/cancel``."""
        p = request.path_params
        return await self.actions.cancel(frame, p["run_ref"], p["task_ref"])

    async def resolve_call(self, request: Request, frame: Frame) -> Response:
        """``POST /runs/{run_ref}/calls/{op_ref}/resolve`` (``admission``)."""
        p = request.path_params
        form: FormData = request.state.form
        return await self.actions.resolve_call(
            frame, p["run_ref"], p["op_ref"], _text(form, "admission"), _text(form, "back")
        )

    async def acknowledge(self, request: Request, frame: Frame) -> Response:
        """``POST /runs/{run_ref}/acknowledge`` (``ref``, ``note``)."""
        form: FormData = request.state.form
        return await self.actions.acknowledge(
            frame, request.path_params["run_ref"], _text(form, "ref"), _text(form, "note")
        )

    async def close_run(self, request: Request, frame: Frame) -> Response:
        """``POST /runs/{run_ref}/close`` (``status``, ``reason``)."""
        form: FormData = request.state.form
        return await self.actions.close_run(
            frame,
            request.path_params["run_ref"],
            _text(form, "status"),
            _text(form, "reason"),
            _text(form, "back"),
        )


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


FLASHES = {
    "answered": "Answer recorded and delivered.",
    "queued": "Answer recorded; not acknowledged yet: it is sent again before the next poll.",
    "cancel": "Cancel requested (recorded as intent). The task's status says when it stops.",
    "resolved": "Verdict recorded.",
    "lost": "Answer recorded, NOT delivered: the server no longer knows the task (now lost).",
    "acknowledged": "Acknowledged (recorded).",
    "closed": "Run closed (recorded); its tasks are left as they are.",
}


def _confirmation(params: Mapping[str, str]) -> str | None:
    """The flash after an action: what was done, and to which request, run and answer, so an
    operator sees at once which of two identical-looking cards was acted on."""
    said = FLASHES.get(params.get("done") or "")
    if said is None:
        return None
    ref, run, answer = params.get("ref"), params.get("run"), params.get("answer")
    if ref and run:
        said += f" Run {run[:80]}" if ref == run else f" {_noun(ref)} {ref[:80]} of run {run[:80]}"
        said += f": {answer[:200]}." if answer else "."
    return said


def _noun(ref: str) -> str:
    """What a reference names, in the confirmation."""
    nouns = {"in_": "Request", "op_": "Call", "tk_": "Task"}
    return "Anomaly" if ":" in ref else nouns.get(ref[:3], "Item")


async def _index(request: Request) -> Response:
    return RedirectResponse("/inbox", status_code=303)


def _static(body: str, media_type: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return Response(body, media_type=media_type)

    return endpoint


def build_app(
    bridge: Bridge,
    tokens: ConsoleTokens,
    signer: SessionSigner | None = None,
    thresholds: Mapping[str, float] | None = None,
) -> Any:
    """The console as an ASGI app over an open ``bridge``. ``thresholds``: the attention
    query's ``overdue_after`` and ``orphan_after`` (seconds), when not its defaults."""
    console = Console(bridge, tokens, signer or SessionSigner(), thresholds)
    page, action = console.page, console.action
    routes = [
        Route("/", _index),
        Route("/static/console.css", _static(CONSOLE_CSS, "text/css")),
        Route("/static/console.js", _static(CONSOLE_JS, "text/javascript")),
        Route("/login", console.login_form, methods=["GET"]),
        Route("/login", console.login, methods=["POST"]),
        Route("/logout", action(console.logout), methods=["POST"]),
        Route("/inbox", page(console.inbox)),
        Route("/runs", page(console.runs)),
        Route("/runs/{run_ref}", page(console.run)),
        Route("/runs/{run_ref}/stream", page(console.stream)),
        Route(
            "/runs/{run_ref}/inputs/{owner_ref}/{input_ref}/answer",
            action(console.answer),
            methods=["POST"],
        ),
        Route("/runs/{run_ref}/tasks/{task_ref}/cancel", action(console.cancel), methods=["POST"]),
        Route("/runs/{run_ref}/acknowledge", action(console.acknowledge), methods=["POST"]),
        Route("/runs/{run_ref}/close", action(console.close_run), methods=["POST"]),
        Route(
            "/runs/{run_ref}/calls/{op_ref}/resolve", action(console.resolve_call), methods=["POST"]
        ),
    ]
    return SecurityHeaders(Starlette(routes=routes))
