"""A TCP forwarder that can be cut: a network path to an API server that stops answering.

``NetCut`` listens on 127.0.0.1 and forwards each connection to ``upstream``. ``cut()`` makes
it what a dead route or a dropped security-group rule looks like from the client: every
connection it forwards is reset, and each new one is accepted and then held, never forwarded
and never answered (a TLS handshake hangs until the client's own timeout). ``restore()``
forwards again; what it held is closed. The workload cluster's kubeconfig (``<cluster>-kubeconfig``)
points here instead of at its API server, so only provider-helm's path is cut: the workload
cluster itself (its controllers, kwok) keeps running.
"""

from __future__ import annotations

import socket
import threading
import time

BUFFER = 65536


class NetCut:
    """A forwarder on 127.0.0.1 to ``(host, port)``; ``address`` is where clients connect."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self.cuts: list[tuple[float, float | None]] = []  # (cut at, restored at), monotonic
        self.held = 0  # connections accepted while cut
        self._open: set[socket.socket] = set()
        self._held: list[socket.socket] = []
        self._is_cut = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> NetCut:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            self._close(list(self._open) + self._held)

    @property
    def is_cut(self) -> bool:
        return self._is_cut

    def cut(self) -> None:
        """From now on nothing gets through; connections in flight are reset."""
        with self._lock:
            self._is_cut = True
            self.cuts.append((time.monotonic(), None))
            self._close(list(self._open))

    def restore(self) -> None:
        """Forward again; the connections held meanwhile are closed (their clients retry)."""
        with self._lock:
            self._is_cut = False
            self.cuts[-1] = (self.cuts[-1][0], time.monotonic())
            self._close(self._held)
            self._held = []

    @staticmethod
    def _close(sockets: list[socket.socket]) -> None:
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._is_cut:
                    self._held.append(client)
                    self.held += 1
                    continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(BUFFER):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            self._close([source, sink])
