"""A "hung Redis": a TCP listener on loopback that accepts connections and never
answers (as a Redis stuck in a long script, or a half-dead host behind a proxy)."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class HungServer:
    """Accepts on ``127.0.0.1:<free port>`` and keeps each connection open, unread and
    unanswered, until :meth:`close`. Use as a context manager."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)  # the accept loop looks at the stop flag this often
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="hung-redis", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()
        return f"redis://{host}:{port}/0"

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        return len(self._held)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self._held.append(conn)  # never read, never answered

    def __enter__(self) -> HungServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()
