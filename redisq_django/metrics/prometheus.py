"""The worker's Prometheus counters and histograms, as worker middleware.

Cost comes first: a handler thread drains a no-op handler in ~15 µs of CPU per message,
and one prometheus-client update costs 0.5-1 µs (2 µs in multiprocess mode, where each is
a write to a memory-mapped file), so nothing here calls prometheus-client per message:

* the counters (handled, retried, dead, lost, failed, reclaimed, unreplicated) are the
  worker's own :class:`~redisq_django.core.worker.Tally`, which the handler threads keep
  anyway;
* the two histograms are counted once per fetched batch, by
  :meth:`PrometheusMiddleware.after_batch`, from what the handler thread recorded on each
  message (how long its handler ran, when it ended, whether it raised), in plain
  per-thread integers (a bucket index and two additions per message, in ns and ms; each
  list has one writer, so no lock);

and a flusher thread adds what changed to the prometheus-client metrics every
:data:`FLUSH_INTERVAL_S` and once more when the worker stops. A scrape is thus at most that
much behind the handlers; a process killed with SIGKILL loses at most that much.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from redisq_django.core.delivery import Delivery
from redisq_django.core.worker import Middleware, RunningWorker
from redisq_django.metrics import extras, families

logger = logging.getLogger("redisq.metrics")

#: How often counted figures are added to the exported metrics (seconds).
FLUSH_INTERVAL_S = 1.0


class _Series:
    """Cumulative observations of one histogram series in whole units (ns or ms: integer
    arithmetic is the cheapest on the hot path), written by one thread only; the flusher
    reads them and exports the difference since its last read."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0


def _bounds(buckets: Sequence[float], per_second: int) -> tuple[int, ...]:
    """Bucket bounds in whole units (``math.inf`` becomes a bound nothing reaches)."""
    return tuple(round(b * per_second) if b != math.inf else 1 << 62 for b in buckets)


_NS, _MS = 1_000_000_000, 1000
#: Bucket bounds of durations in ns and latencies in ms (what the hot path compares).
_DURATION_BOUNDS = _bounds(families.DURATION_BUCKETS, _NS)
_LATENCY_BOUNDS = _bounds(families.LATENCY_BUCKETS, _MS)
_bisect = bisect.bisect_left
_now_ns = time.time_ns
_perf_ns = time.perf_counter_ns


class WorkerMetrics:
    """The prometheus-client metrics of a worker process, registered once per registry."""

    def __init__(self, registry: Any) -> None:
        prom = extras.prometheus()

        def make(cls: Any, fam: families.Family, **extra: Any) -> Any:
            return cls(fam.client_name, fam.help, fam.labels, registry=registry, **extra)

        self.messages = make(prom.Counter, families.MESSAGES)
        self.failures = make(prom.Counter, families.FAILURES)
        self.duplicates = make(prom.Counter, families.DUPLICATES)
        self.reclaimed = make(prom.Counter, families.RECLAIMED)
        self.unreplicated = make(prom.Counter, families.REPLICA_WAIT_TIMEOUTS)
        self.duration = make(prom.Histogram, families.DURATION, buckets=families.DURATION_BUCKETS)
        self.latency = make(prom.Histogram, families.LATENCY, buckets=families.LATENCY_BUCKETS)

    def declare(self, queue: str, consumer: str) -> None:
        """Create the consumer's series at 0, so they exist before its first message."""
        for outcome in families.OUTCOMES:
            self.messages.labels(queue, consumer, outcome)
        self.failures.labels(queue, consumer)
        self.duplicates.labels(queue, consumer)
        self.reclaimed.labels(queue, consumer)
        self.unreplicated.labels(queue, consumer)
        _check_bulk_api(self.duration.labels(queue, consumer))
        self.latency.labels(queue, consumer)

    def count(self, queue: str, consumer: str, what: str, n: int) -> None:
        """Add ``n`` to the counter the tally calls ``what``."""
        if what in families.OUTCOMES:
            self.messages.labels(queue, consumer, what).inc(n)
        elif what == "failed":
            self.failures.labels(queue, consumer).inc(n)
        elif what == "reclaimed":
            self.reclaimed.labels(queue, consumer).inc(n)
        elif what == "skipped":
            self.duplicates.labels(queue, consumer).inc(n)
        elif what == "unreplicated":
            self.unreplicated.labels(queue, consumer).inc(n)


@functools.cache
def worker_metrics(registry: Any = None) -> WorkerMetrics:
    """The worker metrics registered in ``registry`` (default: prometheus-client's global
    one, which the worker endpoint serves along with the application's own metrics)."""
    if registry is None:
        registry = extras.prometheus().REGISTRY
    return WorkerMetrics(registry)


def _check_bulk_api(child: Any) -> None:
    # A histogram child keeps one value per bucket (not cumulative) and its sum;
    # prometheus-client's observe() adds 1 to one bucket and the amount to the sum, which
    # is what _add_observations does n at a time. tests/metrics checks that the result is
    # the same as observe()'s; this names the problem at start-up if a release changes it.
    if not (hasattr(child, "_buckets") and hasattr(child, "_sum")):
        raise extras.MissingExtra(
            "This prometheus-client release keeps histograms differently than redisq "
            "expects (no _buckets/_sum); install prometheus-client>=0.20,<1."
        )


def _add_observations(child: Any, counts: Sequence[int], total: float) -> None:
    """Add ``counts[i]`` observations to bucket ``i`` of a histogram child, and ``total``
    to its sum: observe() for many observations at once."""
    buckets = child._buckets
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
    child._sum.inc(total)


class PrometheusMiddleware(Middleware):
    """Counts a worker's messages into Prometheus metrics (see the module docstring).

    Args:
        registry: where the metrics are registered (default: prometheus-client's global
            registry; in multiprocess mode every process writes its own files anyway).
        flush_interval: seconds between two flushes into the metrics.

    Raises:
        MissingExtra: prometheus-client is not installed.
    """

    def __init__(self, registry: Any = None, *, flush_interval: float = FLUSH_INTERVAL_S) -> None:
        self.metrics = worker_metrics(registry)
        self.flush_interval = flush_interval
        self._local = threading.local()
        self._buffers: list[dict[tuple[str, str], tuple[_Series, _Series]]] = []
        self._buffers_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        # What each cumulative figure was at the last flush: the tally's counts (of the
        # worker running) and each series' counts and sum.
        self._tally_exported: dict[tuple[str, str, str], int] = {}
        self._series_exported: dict[int, tuple[list[int], int]] = {}
        self._worker: RunningWorker | None = None
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None

    # -- hooks ---------------------------------------------------------------------------

    def on_worker_start(self, worker: RunningWorker) -> None:
        with self._flush_lock:
            self._worker = worker
            self._tally_exported = {}  # a new worker's tally starts at 0
        for queue, consumer in worker.specs:
            self.metrics.declare(queue, consumer)
        self._stop.clear()
        self._flusher = threading.Thread(
            target=self._flush_every, name="redisq-metrics-flush", daemon=True
        )
        self._flusher.start()

    def on_worker_stop(self, worker: RunningWorker) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
        self.flush()

    def after_batch(self, deliveries: Sequence[Delivery]) -> None:
        # The hot path, once per fetched batch: no lock, no prometheus-client call, no
        # allocation, a few integer operations per message. Every message of a batch is
        # of the consumer its thread serves: one look-up finds the series.
        if not deliveries:
            return
        local = self._local
        first = deliveries[0]
        try:
            if first.consumer is local.consumer and first.queue is local.queue:
                duration, latency = local.series
            else:
                duration, latency = self._series_of(first)
        except AttributeError:  # this thread's first batch
            duration, latency = self._series_of(first)
        # One clock reading maps the handlers' end times (perf counter) to wall time.
        to_wall_ns = _now_ns() - _perf_ns()
        durations, latencies = duration.counts, latency.counts
        where, duration_bounds, latency_bounds = _bisect, _DURATION_BOUNDS, _LATENCY_BOUNDS
        took_sum = waited_sum = 0
        for m in deliveries:
            took = m.duration_ns
            if took is None:  # handed back without running
                continue
            durations[where(duration_bounds, took)] += 1
            took_sum += took
            if m.failed or m.ended_ns is None:
                continue
            waited = (m.ended_ns + to_wall_ns) // 1_000_000 - (m.due_at_ms or m.published_at_ms)
            if waited < 0:  # clocks of publisher and worker may disagree by a little
                waited = 0
            latencies[where(latency_bounds, waited)] += 1
            waited_sum += waited
        duration.total += took_sum
        latency.total += waited_sum

    def _series_of(self, delivery: Delivery) -> tuple[_Series, _Series]:
        local = self._local
        mine = getattr(local, "buffer", None)
        if mine is None:
            mine = local.buffer = self._new_buffer()
        key = (delivery.queue, delivery.consumer)
        series = mine.get(key)
        if series is None:
            series = mine[key] = (
                _Series(len(_DURATION_BOUNDS)),
                _Series(len(_LATENCY_BOUNDS)),
            )
        local.queue, local.consumer, local.series = delivery.queue, delivery.consumer, series
        return series

    # -- flushing ------------------------------------------------------------------------

    def _new_buffer(self) -> dict[tuple[str, str], tuple[_Series, _Series]]:
        buffer: dict[tuple[str, str], tuple[_Series, _Series]] = {}
        with self._buffers_lock:
            self._buffers.append(buffer)
        return buffer

    def _flush_every(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self.flush()
            except Exception:  # never let metrics stop: try again next time
                logger.exception("Could not update the worker's metrics; trying again")

    def flush(self) -> None:
        """Add what was counted since the last flush to the exported metrics."""
        with self._flush_lock:
            if self._worker is not None:
                for (queue, consumer, what), n in self._worker.tally.snapshot().items():
                    key = (queue, consumer, what)
                    delta = n - self._tally_exported.get(key, 0)
                    if delta > 0:
                        self.metrics.count(queue, consumer, what, delta)
                        self._tally_exported[key] = n
            with self._buffers_lock:
                buffers = list(self._buffers)
            for buffer in buffers:
                for (queue, consumer), (duration, latency) in list(buffer.items()):
                    self._export(self.metrics.duration, queue, consumer, duration, _NS)
                    self._export(self.metrics.latency, queue, consumer, latency, _MS)

    def _export(
        self, histogram: Any, queue: str, consumer: str, series: _Series, per_second: int
    ) -> None:
        # Read once: the handler thread may add more meanwhile; the next flush gets it.
        counts, total = list(series.counts), series.total
        # Series live as long as this middleware (its buffers keep them): ids stay theirs.
        then_counts, then_total = self._series_exported.get(id(series), ([0] * len(counts), 0))
        delta = [now - then for now, then in zip(counts, then_counts, strict=True)]
        if any(delta):
            seconds = (total - then_total) / per_second
            _add_observations(histogram.labels(queue, consumer), delta, seconds)
            self._series_exported[id(series)] = (counts, total)
