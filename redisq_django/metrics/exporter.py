"""The worker's metrics endpoint: ``runconsumer --metrics-port N [--metrics-host H]``.

One process (``--processes 1``): the worker serves prometheus-client's global registry
(our metrics, the application's own, and the process's CPU and memory) itself.

``--processes N``: prometheus-client's multiprocess mode, with a directory of its own for
each run of the supervisor. Each worker process writes its metrics to memory-mapped files
there (``PROMETHEUS_MULTIPROC_DIR``, set in the children's environment before they start,
as prometheus-client requires); the supervisor serves the sum over every file. Chosen over
the supervisor scraping and adding up its children because:

* a child that dies and is restarted keeps counting: the files of the dead process stay
  and still add in, so the counters never go backwards (the supervisor would lose what it
  had not scraped yet);
* the children need no port and no channel to the supervisor, and the supervisor stays
  what it is (it only serves and, when a child exits, lets the client drop that process's
  live gauges);
* the application's own metrics in handlers are aggregated the same way, for free.

The directory is new for each run (stale files of an earlier run would add in) and is
removed when the supervisor exits. Process metrics (CPU, memory) are not available in
multiprocess mode (a prometheus-client limitation).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core.errors import RedisqError
from redisq_django.metrics import extras

logger = logging.getLogger("redisq.metrics")

#: The environment variable prometheus-client reads (at import) for multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Where the worker endpoint binds unless told otherwise: reachable from this host only.
DEFAULT_HOST = "127.0.0.1"
#: The path the endpoint answers on (any other path answers too: prometheus-client's server).
PATH = "/metrics"


class MetricsServerError(RedisqError):
    """The metrics endpoint could not be started (port taken, address not local...)."""


@dataclass
class MetricsServer:
    """A running metrics endpoint; :meth:`close` stops it (and removes a run directory).

    Attributes:
        host: the address it listens on.
        port: the port (the one chosen by the system when 0 was asked).
        directory: the multiprocess directory of this run, if any.
    """

    host: str
    port: int
    directory: str | None = None
    _httpd: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{PATH}"

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def multiprocess_registry(directory: str) -> Any:
    """A registry that serves the sum of every process's files in ``directory``."""
    prom = extras.prometheus()
    from prometheus_client import multiprocess

    registry = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry


def _serve(host: str, port: int, registry: Any, directory: str | None) -> MetricsServer:
    prom = extras.prometheus()
    try:
        httpd, _thread = prom.start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        raise MetricsServerError(
            f"Cannot serve metrics on {host}:{port}: {exc.strerror or exc}. Choose another "
            "--metrics-port (0: any free port) or --metrics-host."
        ) from None
    bound_host, bound_port = httpd.server_address[:2]
    return MetricsServer(
        host=str(bound_host), port=int(bound_port), directory=directory, _httpd=httpd
    )


def serve_worker(port: int, host: str = DEFAULT_HOST) -> MetricsServer:
    """Serve this process's metrics (``--processes 1``).

    When the environment already sets ``PROMETHEUS_MULTIPROC_DIR`` (an application run
    in multiprocess mode), the sum over that directory is served instead, as
    prometheus-client's documentation asks.

    Raises:
        MissingExtra: prometheus-client is not installed.
        MetricsServerError: the port cannot be bound.
    """
    prom = extras.prometheus()
    directory = os.environ.get(MULTIPROC_ENV)
    registry = multiprocess_registry(directory) if directory else prom.REGISTRY
    return _serve(host, port, registry, None)


def serve_supervisor(port: int, host: str = DEFAULT_HOST) -> MetricsServer:
    """Create this run's multiprocess directory and serve the sum of its files
    (``--processes N``); the children get ``{MULTIPROC_ENV: server.directory}``.

    Raises:
        MissingExtra: prometheus-client is not installed.
        MetricsServerError: the port cannot be bound.
    """
    extras.prometheus()
    directory = tempfile.mkdtemp(prefix="redisq-metrics-")
    return _serve(host, port, multiprocess_registry(directory), directory)


def child_exited(directory: str, pid: int) -> None:
    """Drop the live gauges of a worker process that exited (its counters stay)."""
    from prometheus_client import multiprocess

    try:
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
    except OSError as exc:  # the directory went away: nothing to drop
        logger.debug("Could not mark process %d dead in %s: %s", pid, directory, exc)
