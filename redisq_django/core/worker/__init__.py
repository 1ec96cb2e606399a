"""The worker's room of the core: handler threads, housekeeping on one clock, middleware
hooks, and the supervisor of worker processes. Outside this room, import these names
from here (``tests/test_structure.py`` keeps it so)."""

from redisq_django.core.worker.burst import run_burst
from redisq_django.core.worker.middleware import Middleware, MiddlewareChain, RunningWorker
from redisq_django.core.worker.state import Quota, StopSignal, Tally
from redisq_django.core.worker.supervisor import COLD_SIGNAL, Supervisor, is_supervised
from redisq_django.core.worker.threads import HandlerThread
from redisq_django.core.worker.ticker import Every, Ticker
from redisq_django.core.worker.worker import Worker, WorkerOptions

__all__ = [
    "COLD_SIGNAL",
    "Every",
    "HandlerThread",
    "Middleware",
    "MiddlewareChain",
    "Quota",
    "RunningWorker",
    "StopSignal",
    "Supervisor",
    "Tally",
    "Ticker",
    "Worker",
    "WorkerOptions",
    "is_supervised",
    "run_burst",
]
