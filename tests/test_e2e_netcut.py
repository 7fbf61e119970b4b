"""e2e/faults/netcut.py: the TCP path that can be cut, against a real echo server on loopback."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from e2e.faults.netcut import NetCut


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def cut() -> Iterator[NetCut]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = NetCut("127.0.0.1", server.server_address[1]).start()
    yield running
    running.stop()
    server.shutdown()
    server.server_close()


def connect(cut: NetCut) -> socket.socket:
    return socket.create_connection(("127.0.0.1", cut.port), timeout=2)


def echoes(conn: socket.socket, data: bytes = b"ping") -> bool:
    conn.sendall(data)
    try:
        return conn.recv(4096) == data
    except (TimeoutError, ConnectionError):
        return False


def test_it_forwards_until_cut_then_holds_every_connection_unanswered(cut: NetCut) -> None:
    before = connect(cut)
    assert echoes(before)
    cut.cut()
    # The connection in flight was reset: nothing more comes back on it.
    with pytest.raises((ConnectionError, OSError, AssertionError)):
        assert echoes(before, b"again")
    held = connect(cut)  # accepted (a black hole, not a refusal)...
    held.settimeout(0.5)
    assert not echoes(held)  # ...and never answered
    assert cut.is_cut and cut.held == 1
    cut.restore()
    assert held.recv(1) == b""  # what was held is closed: its client retries
    after = connect(cut)
    assert echoes(after, b"back")
    assert len(cut.cuts) == 1 and cut.cuts[0][1] is not None and cut.cuts[0][1] >= cut.cuts[0][0]
    for s in (before, held, after):
        s.close()
