"""What a server's ``taskId`` must look like before the bridge keeps it as a handle.

The Tasks extension puts no bound on a ``taskId``, but the bridge stores it, indexes it, and
sends it back in the ``Mcp-Name`` header of every ``tasks/get|update|cancel``. An unbounded id
is a hazard for everything sharing that server's connection (a 1 MB header makes the server
drop the connection), so an id is checked once, when the handle is created, and refused there.
"""

from __future__ import annotations

# Real servers use UUIDs or ~43-character random tokens; 256 bytes leaves room for
# structured ids while keeping the Mcp-Name header far below any server's header limit
# (uvicorn/h11 refuse a request whose headers pass 16 KB, most proxies 8 KB).
MAX_TASK_ID_BYTES = 256


def task_id_problem(task_id: str) -> str | None:
    """Why ``task_id`` cannot be a handle, or ``None`` when it can.

    The text never quotes the id (it may be huge, and it is a bearer-like handle).
    """
    if not task_id:
        return "empty taskId"
    size = len(task_id.encode("utf-8", errors="surrogatepass"))
    if size > MAX_TASK_ID_BYTES:
        return f"taskId of {size} bytes (the bridge keeps at most {MAX_TASK_ID_BYTES})"
    if not task_id.isprintable():  # control characters, lone surrogates, line separators
        return "taskId with control or non-printable characters"
    return None
