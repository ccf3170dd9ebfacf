"""A failed connect names its cause and the fix: HTTP 401/403 -> ServerCredentialsRejected
(naming the server and the setting), refused -> ServerNotReachable, TLS -> ServerTlsFailed;
each against a real loopback server (bridge.testing's task server behind a bearer, a
Starlette app answering 403, a bound port that never listens, a TLS server whose certificate
comes from a CA this machine does not trust), on both HTTP engines."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
import trustme
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bridge import Bridge, BridgeSettings, McpServerConfig, OutcomeKind, WaitMode
from bridge.errors import (
    ServerConnectFailed,
    ServerCredentialsRejected,
    ServerNotReachable,
    ServerTlsFailed,
)
from bridge.uhp.serving._listening import listening_socket
from tests.support.processes import HOST, ServerProcess, refused_port

pytestmark = pytest.mark.anyio

TOKEN = "connect-errors-token"
ENGINES = ["aiohttp", "httpcore"]
REPORT = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.05}


@pytest.fixture(scope="module")
def task_server() -> Iterator[ServerProcess]:
    server = ServerProcess("bridge.testing.server", args=["--token", TOKEN])
    server.start()
    yield server
    server.stop()


async def call_once(tmp_path: Path, config: McpServerConfig, token: str | None = None) -> object:
    """One bridged call of ``generate_report`` on ``config``: its outcome, or the error."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = BridgeSettings(
        ledger_url=str(tmp_path / "ledger.db"),
        principals=["acme"],
        mcp_servers=[config],
        credentials=lambda _ref: token,
    )
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_c1", session_id="hsess_c1", harness_id="chrn_c"
        )
        try:
            return await run.call_tool(config.name, "generate_report", REPORT, wait=WaitMode.WAIT)
        except ServerConnectFailed as exc:
            return exc


@pytest.mark.parametrize("engine", ENGINES)
async def test_no_credentials_is_a_credentials_error_naming_the_setting(
    tmp_path: Path, task_server: ServerProcess, engine: str
) -> None:
    config = McpServerConfig(name="reports", url=task_server.url, http_engine=engine)  # type: ignore[arg-type]
    error = await call_once(tmp_path, config)
    assert isinstance(error, ServerCredentialsRejected), error
    assert (error.server, error.status, error.sent_credentials) == ("reports", 401, False)
    text = str(error)
    assert "'reports'" in text and "401" in text
    assert "McpServerConfig" in text and "credential_ref" in text
    assert "BridgeSettings.credentials" in text
    assert "unreachable" not in text


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_wrong_token_is_a_credentials_error_that_says_it_was_sent(
    tmp_path: Path, task_server: ServerProcess, engine: str
) -> None:
    config = McpServerConfig(
        name="reports",
        url=task_server.url,
        credential_ref="reports",
        http_engine=engine,  # type: ignore[arg-type]
    )
    error = await call_once(tmp_path, config, token="not-the-token")
    assert isinstance(error, ServerCredentialsRejected), error
    assert error.sent_credentials and "refused" in str(error)
    assert "not-the-token" not in str(error)


async def test_the_right_token_by_reference_or_header_makes_the_call(
    tmp_path: Path, task_server: ServerProcess
) -> None:
    by_ref = McpServerConfig(name="reports", url=task_server.url, credential_ref="reports")
    outcome = await call_once(tmp_path / "ref", by_ref, token=TOKEN)
    assert getattr(outcome, "kind", None) is OutcomeKind.TASK_ENDED, outcome
    headers = {"Authorization": f"Bearer {TOKEN}"}
    by_header = McpServerConfig(name="reports", url=task_server.url, headers=headers)
    assert TOKEN not in repr(by_header)
    outcome = await call_once(tmp_path / "header", by_header)
    assert getattr(outcome, "kind", None) is OutcomeKind.TASK_ENDED, outcome


async def _forbidden(_request: Request) -> JSONResponse:
    return JSONResponse({"error": "forbidden"}, status_code=403)


async def serve_in_loop(app: object, sock: socket.socket, **config: object) -> AsyncIterator[None]:
    """Serve ``app`` on ``sock`` in this event loop while the block runs."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", **config))  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        yield
        server.should_exit = True


@pytest.mark.parametrize("engine", ENGINES)
async def test_403_is_a_credentials_error(tmp_path: Path, engine: str) -> None:
    app = Starlette(routes=[Route("/mcp", _forbidden, methods=["GET", "POST", "DELETE"])])
    sock = listening_socket(HOST, 0)
    url = f"http://{HOST}:{sock.getsockname()[1]}/mcp"
    async for _ in serve_in_loop(app, sock):
        config = McpServerConfig(name="forbidding", url=url, http_engine=engine)  # type: ignore[arg-type]
        error = await call_once(tmp_path, config)
    assert isinstance(error, ServerCredentialsRejected), error
    assert (error.server, error.status) == ("forbidding", 403)
    assert "403 Forbidden" in str(error)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_refused_port_is_unreachable(tmp_path: Path, engine: str) -> None:
    with refused_port() as port:
        url = f"http://{HOST}:{port}/mcp"
        config = McpServerConfig(name="gone", url=url, http_engine=engine)  # type: ignore[arg-type]
        error = await call_once(tmp_path, config)
    assert isinstance(error, ServerNotReachable), error
    assert error.server == "gone" and "refused" in str(error)
    assert "check its url" in str(error)


@pytest.mark.parametrize("engine", ENGINES)
async def test_https_to_a_plain_http_port_is_a_tls_error(
    tmp_path: Path, task_server: ServerProcess, engine: str
) -> None:
    url = task_server.url.replace("http://", "https://")
    config = McpServerConfig(name="reports", url=url, http_engine=engine)  # type: ignore[arg-type]
    error = await call_once(tmp_path, config)
    assert isinstance(error, ServerTlsFailed), error
    assert error.server == "reports" and "TLS" in str(error)


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_untrusted_certificate_is_a_tls_error(tmp_path: Path, engine: str) -> None:
    authority = trustme.CA()  # never added to this process's trust store
    cert = authority.issue_cert(HOST)
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    app = Starlette(routes=[Route("/mcp", _forbidden, methods=["GET", "POST"])])
    sock = listening_socket(HOST, 0)
    url = f"https://{HOST}:{sock.getsockname()[1]}/mcp"
    tls = {"ssl_certfile": str(cert_file), "ssl_keyfile": str(key_file)}
    async for _ in serve_in_loop(app, sock, **tls):
        config = McpServerConfig(name="selfsigned", url=url, http_engine=engine)  # type: ignore[arg-type]
        error = await call_once(tmp_path, config)
    assert isinstance(error, ServerTlsFailed), error
    assert error.server == "selfsigned"
