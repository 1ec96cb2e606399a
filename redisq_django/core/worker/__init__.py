"""The worker: handler threads, housekeeping on one clock, middleware hooks."""

from redisq_django.core.worker.middleware import Middleware, MiddlewareChain, RunningWorker
from redisq_django.core.worker.state import Quota, StopSignal, Tally
from redisq_django.core.worker.threads import HandlerThread
from redisq_django.core.worker.ticker import Every, Ticker
from redisq_django.core.worker.worker import Worker, WorkerOptions

__all__ = [
    "Every",
    "HandlerThread",
    "Middleware",
    "MiddlewareChain",
    "Quota",
    "RunningWorker",
    "StopSignal",
    "Tally",
    "Ticker",
    "Worker",
    "WorkerOptions",
]
