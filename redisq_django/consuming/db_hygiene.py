"""Worker middleware for Django: database-connection hygiene around each batch."""

from __future__ import annotations

from collections.abc import Sequence

from asgiref.sync import SyncToAsync
from django.db import close_old_connections

from redisq_django.core.delivery import Delivery
from redisq_django.core.worker import Middleware

#: How long a batch waits for the connections of asgiref's thread to be checked (s).
ASYNC_THREAD_TIMEOUT_S = 30.0


def _close_old_connections_of_async_code() -> None:
    """``close_old_connections`` in the thread where async handlers' ORM calls run.

    ``sync_to_async`` (and the ORM's async methods) called from the worker's event loop
    run in asgiref's one shared thread, whose connections no batch of ours touches: after
    a database restart they would stay broken for good. Only once that thread exists
    (some async code used it), and queued behind whatever runs there now.
    """
    executor = SyncToAsync.single_thread_executor
    if getattr(executor, "_threads", None):  # a ThreadPoolExecutor's started threads
        executor.submit(close_old_connections).result(timeout=ASYNC_THREAD_TIMEOUT_S)


class DjangoDatabaseMiddleware(Middleware):
    """Closes stale or broken database connections around each fetched batch, as Django
    does around each request, so a long-running worker survives database restarts: in
    the handler threads and in the thread where async handlers' ORM calls run."""

    def before_batch(self, deliveries: Sequence[Delivery]) -> None:
        close_old_connections()
        _close_old_connections_of_async_code()

    def after_batch(self, deliveries: Sequence[Delivery]) -> None:
        close_old_connections()
        _close_old_connections_of_async_code()
