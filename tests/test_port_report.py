"""The socket every child server is served on (``harness_examples.port_report``)."""

from __future__ import annotations

import socket

from harness_examples.port_report import bound_port, listening_socket


def test_connections_accepted_on_the_served_socket_do_not_wait_for_delayed_acks() -> None:
    # Without TCP_NODELAY a small response waits ~40 ms for the peer's delayed ACK: a loopback
    # tools/call went from ~2 ms to ~44 ms (make bench, call section) before this was set.
    with (
        listening_socket("127.0.0.1", 0) as server,
        socket.create_connection(("127.0.0.1", bound_port(server)), timeout=5),
    ):
        accepted, _ = server.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
