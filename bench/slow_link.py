"""A Redis that answers from farther away: a TCP proxy, in a process of its own, that
holds every reply ``delay_ms`` before passing it on (requests go through at once), so a
round trip costs what it costs to a Redis across a data centre (0.5-2 ms) instead of a
loopback's 50 µs. Pipelined replies keep their pace: each is held ``delay_ms`` from when
it arrived, not from when the previous one left.

``with SlowLink(port, delay_ms) as url:`` — the proxy's ``redis://`` URL. Alone:
``.venv/bin/python bench/slow_link.py TARGET_PORT LISTEN_PORT DELAY_MS``.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from types import TracebackType

HOST = "127.0.0.1"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def hand_on() -> None:
        while True:
            due, data = await held.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(hand_on())
    try:
        while data := await reader.read(65536):
            held.put_nowait((time.monotonic() + delay_s, data))
    finally:
        held.put_nowait((0.0, b""))
        await sender
        writer.close()


async def _serve(target_port: int, listen_port: int, delay_s: float) -> None:
    async def connect(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(HOST, target_port)
        for w in (client_w, server_w):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _pump(client_r, server_w, 0.0),
            _pump(server_r, client_w, delay_s),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connect, HOST, listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class SlowLink:
    """The proxy process, started on entry and stopped on exit."""

    def __init__(self, target_port: int, delay_ms: float) -> None:
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.port = _free_port()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> str:
        args = [sys.executable, __file__, str(self.target_port), str(self.port)]
        self._proc = subprocess.Popen(
            [*args, str(self.delay_ms)], stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        assert self._proc.stdout.readline().strip() == "ready"
        return f"redis://{HOST}:{self.port}/0"

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)


if __name__ == "__main__":
    target, listen, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    asyncio.run(_serve(target, listen, delay / 1000.0))
