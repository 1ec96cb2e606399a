"""A real Redis Sentinel (``redis-server --sentinel``) watching one master, for tests.

Bound to 127.0.0.1 on a free port with its config file in a temporary directory (a
sentinel rewrites its own config file, so it needs one). It never fails the master over
by itself (``down-after-milliseconds`` is 60 s): the tests stop or hang the master to see
what the application does, not what Sentinel does.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from tests.support.redis_server import (
    HOST,
    START_TIMEOUT,
    RedisServerError,
    _die_with_parent,
    free_port,
)


class SentinelProcess:
    """A sentinel monitoring ``master_port`` as the service :attr:`service`.

    The service is named after the master's port: clients keep pools per service name
    (django-redis for the whole process), so that each test's differs.
    """

    def __init__(self, binary: str, workdir: Path, master_port: int) -> None:
        self.binary = binary
        self.workdir = workdir
        self.master_port = master_port
        self.service = f"master{master_port}"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "sentinel.conf"
        config.write_text(
            f"port {self.port}\n"
            f"bind {HOST}\n"
            "daemonize no\n"
            f"dir {self.workdir}\n"
            f"logfile {self.workdir / 'sentinel.log'}\n"
            f"sentinel monitor {self.service} {HOST} {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 60000\n"
            f"sentinel failover-timeout {self.service} 180000\n"
        )
        self._proc = subprocess.Popen(
            [self.binary, str(config), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.workdir,
            preexec_fn=_die_with_parent(),  # never outlives a test run that crashed
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log = (self.workdir / "sentinel.log").read_text(errors="replace")[-2000:]
                raise RedisServerError(f"redis sentinel exited while starting:\n{log}")
            try:
                if self.master_address() == (HOST, self.master_port):
                    return self
            except redis.RedisError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RedisServerError(f"redis sentinel on port {self.port} did not answer in time")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def cache(self) -> dict[str, Any]:
        """A django-redis cache (``CACHES`` entry) that finds the master through this
        sentinel (django-redis's ``SentinelClient``)."""
        return {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{self.service}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": [(HOST, self.port)],
            },
        }

    def master_address(self) -> Any:
        client = redis.Redis(host=HOST, port=self.port, socket_timeout=1, decode_responses=True)
        try:
            found = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        finally:
            client.close()
        return (found[0], int(found[1])) if found else None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
