"""Typed errors raised by the bridge. Messages never include raw task ids or credentials.

Catch :class:`BridgeError` for everything the bridge raises on purpose. The tree (the UHP
errors live in :mod:`bridge.uhp._errors`; every name is exported by :mod:`bridge.errors`)::

    BridgeError
    ├── LedgerError                  a ledger write was refused; nothing was written
    │   ├── NotFound                 no such record for this principal
    │   ├── InvalidTransition        a state machine forbids the change
    │   ├── ConflictingIds           the run already carries other UHP ids
    │   ├── OperationReused          an operation id reused for another call
    │   ├── DuplicateTaskHandle      a task id the ledger holds for another call
    │   ├── UnknownInputKey          the task never asked for that input
    │   ├── InputAlreadyAnswered     input requests are answered once
    │   ├── LeaseLost                the row is no longer leased to this replica
    │   ├── LedgerUnavailable        the database is gone, unopenable or locked too long
    │   └── AgentStateTooLarge       an agent state over the size bound (nothing written)
    ├── McpSideError
    │   ├── UnknownServer            no enabled MCP server with that name
    │   ├── ServerConnectFailed      could not connect; nothing was sent
    │   │   ├── ServerNotReachable    no answer: DNS, refused, timed out, closed
    │   │   ├── ServerCredentialsRejected  HTTP 401/403: fix the server's credential
    │   │   └── ServerTlsFailed      the TLS handshake or the certificate failed
    │   ├── InvalidTaskResponse      the server broke the protocol (recorded as unknown)
    │   │   └── MalformedTaskHandle  an empty, oversized, unprintable or duplicate taskId
    │   ├── TaskRequestFailed        tasks/get|update|cancel failed
    │   └── AnswerRefused            the server refused a tasks/update (not delivered)
    ├── NoToolResult                 the step holds no tool result to read
    ├── InvalidAnswer                an answer that does not fit its request (.problems)
    ├── WaitTimedOut                 wait_for's timeout passed (also a TimeoutError)
    ├── UhpError                     a UHP request failed (bridge.uhp._errors)
    │   ├── UhpAuthError
    │   ├── UhpInvalidRequest
    │   │   ├── UhpNotFound
    │   │   ├── UhpSessionBusy
    │   │   └── UhpUnsupportedVersion
    │   ├── UhpRateLimited
    │   ├── UhpQuotaExhausted
    │   └── UhpServerError
    ├── StreamFault                  a UHP stream broke unsafely (resume instead)
    ├── ResponseNotFollowable        the run cannot be followed
    ├── RequestNotRepostable         no recorded request body to send again as it was
    └── MissingExtra                 a module needs an extra that is not installed (ImportError)

``tests/test_public_api.py`` checks this drawing against the classes.
"""

from __future__ import annotations


class BridgeError(Exception):
    """Base class of every error the bridge raises on purpose."""


class LedgerError(BridgeError):
    """A ledger operation was refused; nothing was written."""


class NotFound(LedgerError):
    """No record with that reference exists *for this principal* (other tenants are invisible)."""

    def __init__(self, kind: str, ref: str) -> None:
        super().__init__(f"{kind} {ref!r} not found for this principal")
        self.kind = kind
        self.ref = ref


class InvalidTransition(LedgerError):
    """A write asked for a state change its state machine forbids."""


class ConflictingIds(LedgerError):
    """An outer response already carries different UHP ids than the ones offered."""


class OperationReused(LedgerError):
    """An operation id was reused for a different tool call (other tool or other arguments)."""


class DuplicateTaskHandle(LedgerError):
    """The server returned a task id the ledger already holds for another call.

    The reference in the message is the bridge-local one; the raw id is never echoed.
    """


class UnknownInputKey(LedgerError):
    """An answer names an input request key the task never asked for."""


class InputAlreadyAnswered(LedgerError):
    """An input request key was answered before; keys are answered at most once."""


class McpSideError(BridgeError):
    """An error on the MCP side of the bridge."""


class UnknownServer(McpSideError):
    """No MCP server with that name (or endpoint) is configured and enabled."""


class ServerConnectFailed(McpSideError):
    """The bridge could not connect to the MCP server; nothing was sent. The subclasses say
    why (unreachable, credentials refused, TLS); catch this one for all of them."""

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"MCP server {server!r}: could not connect: {detail}")
        self.server = server
        self.detail = detail


class ServerNotReachable(ServerConnectFailed):
    """No answer from the MCP server: its name does not resolve, the connection was refused or
    closed, or the connect timed out. Check ``McpServerConfig.url`` and that the server runs."""

    def __init__(self, server: str, detail: str) -> None:
        McpSideError.__init__(
            self, f"MCP server {server!r} unreachable: {detail} (check its url and that it runs)"
        )
        self.server = server
        self.detail = detail


class ServerCredentialsRejected(ServerConnectFailed):
    """The MCP server answered HTTP 401 or 403: the bridge's credentials for it are missing or
    wrong. Fix ``McpServerConfig.credential_ref`` (the name) and what ``BridgeSettings.credentials``
    resolves it to (the token), or the ``Authorization`` entry of ``McpServerConfig.headers``."""

    def __init__(self, server: str, status: int, *, sent_credentials: bool) -> None:
        said = "401 Unauthorized" if status == 401 else f"{status} Forbidden"
        cause = (
            "the bearer token sent was refused"
            if sent_credentials
            else "no credentials were sent (McpServerConfig.credential_ref is not set, or "
            "BridgeSettings.credentials resolved it to nothing)"
        )
        McpSideError.__init__(
            self,
            f"MCP server {server!r} refused the bridge's credentials (HTTP {said}): {cause}; "
            f"set McpServerConfig(name={server!r}, credential_ref=...) and resolve it in "
            "BridgeSettings.credentials",
        )
        self.server = server
        self.status = status
        self.sent_credentials = sent_credentials
        self.detail = f"HTTP {status}"


class ServerTlsFailed(ServerConnectFailed):
    """The TLS handshake with the MCP server failed: an untrusted or mismatched certificate, or
    an ``https://`` URL for a server that speaks plain HTTP (or the reverse)."""

    def __init__(self, server: str, detail: str) -> None:
        McpSideError.__init__(
            self,
            f"MCP server {server!r}: TLS failed: {detail} (check the url's scheme and that the "
            "server's certificate is trusted here: SSL_CERT_FILE, or the system store)",
        )
        self.server = server
        self.detail = detail


class InvalidTaskResponse(McpSideError):
    """The server answered with something the protocol forbids (for example a task result on a
    request that did not declare the tasks capability, or a malformed task). The dispatch is
    recorded as an unknown outcome and an anomaly event is written; nothing counts as success."""

    def __init__(self, op_ref: str, detail: str) -> None:
        super().__init__(f"dispatch {op_ref}: {detail}")
        self.op_ref = op_ref
        self.detail = detail


class MalformedTaskHandle(InvalidTaskResponse):
    """The server's ``taskId`` cannot be kept as a handle: empty, longer than the bridge's cap,
    containing control characters, or one the ledger already holds for another call. Nothing
    was stored as a task; the dispatch is an unknown outcome with an anomaly on its own run."""


class TaskRequestFailed(McpSideError):
    """A ``tasks/get|update|cancel`` request failed (JSON-RPC error or transport failure)."""

    def __init__(self, task_ref: str, detail: str, code: int | None = None) -> None:
        super().__init__(f"task {task_ref}: {detail}")
        self.task_ref = task_ref
        self.detail = detail
        self.code = code


class AnswerRefused(McpSideError):
    """The server answered the ``tasks/update`` carrying an answer with a JSON-RPC error.

    The refusal is recorded (``task.input_answer_refused``, and an ``update_refused`` anomaly
    on the task's run): the refused answer is not delivered and never resent (not by
    ``recover`` either), and the request is answerable again, so a corrected answer is
    accepted. A ``-32602`` is confirmed with ``tasks/get`` first: only a
    task the server no longer knows is lost (then the receipt says ``task_lost`` instead).
    ``reason`` is the server's message with the raw task id scrubbed out.
    """

    def __init__(self, task_ref: str, input_ref: str, reason: str, code: int | None) -> None:
        super().__init__(f"task {task_ref}: answer to {input_ref} refused: {reason}")
        self.task_ref = task_ref
        self.input_ref = input_ref
        self.reason = reason
        self.code = code


class LeaseLost(LedgerError):
    """A leased write was refused: the row is no longer held by this replica incarnation.

    Another replica took it over (this one's membership lapsed) or it was released; the
    observation this replica was about to write may be stale, so it is dropped, not written.
    """

    def __init__(self, kind: str, ref: str) -> None:
        super().__init__(f"{kind} {ref!r} is no longer leased to this replica")
        self.kind = kind
        self.ref = ref


class NoToolResult(BridgeError):
    """The step holds no tool result to read (still pending, failed without a result, lost,
    unknown, refused, or truncated in the ledger). The message says which."""


class InvalidAnswer(BridgeError):
    """An answer does not fit its input request: content against the requested schema
    (unknown fields included), or an action the request's method does not take. Checked before
    anything is recorded or sent; the request stays answerable. ``problems`` names each field
    and what is wrong with it, one line each (``"approve: 'yes' is not of type 'boolean'"``)."""

    def __init__(self, input_ref: str, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.detail = "; ".join(self.problems) or "the answer does not fit"
        super().__init__(f"input request {input_ref}: {self.detail}")
        self.input_ref = input_ref


class WaitTimedOut(BridgeError, TimeoutError):
    """``Run.wait_for`` gave up: some tasks are still open. The tasks go on (watched)."""

    def __init__(self, pending: list[str], timeout: float) -> None:
        super().__init__(f"{len(pending)} task(s) still open after {timeout:g} s: {pending}")
        self.pending = pending
        self.timeout = timeout


class LedgerUnavailable(LedgerError):
    """The ledger's database cannot take work: it could not be opened, its file was deleted or
    replaced under the running process, it refuses writes (read-only, full, corrupt), or
    another connection held its write lock past the wait deadline. Nothing was written by the
    refused operation; what was committed before stays committed. ``reason`` says which, in
    one line (no credentials: a PostgreSQL URL's password is never quoted)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"ledger unavailable: {reason}")
        self.reason = reason


class AgentStateTooLarge(LedgerError):
    """An agent state (``Run.save_agent_state``) is over the ledger's bound once serialised;
    nothing was written."""


class MissingExtra(BridgeError, ImportError):
    """A module needs packages of an extra that is not installed: the message names the
    ``pip install 'uhp-mcp-bridge[EXTRA]'`` that brings them (see :mod:`bridge._extras`)."""

    def __init__(self, feature: str, extra: str, missing: list[str]) -> None:
        super().__init__(
            f"{feature} needs the [{extra}] extra ({', '.join(missing)} not installed): "
            f"pip install 'uhp-mcp-bridge[{extra}]'",
            name=missing[0] if missing else None,
        )
        self.feature = feature
        self.extra = extra
        self.missing = missing
