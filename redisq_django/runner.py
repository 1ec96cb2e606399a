"""The ``runconsumer`` process: a :class:`~redisq_django.core.worker.Worker` built from
Django configuration, with every capability's housekeeping jobs (the schedules, the
dead-letter sink, the outbox relay, the trend samples) and middleware (database
hygiene, tracing, metrics).

The one module that imports every capability (docs/layout.md): each of them knows only
what it does, and this module puts them together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.db import close_old_connections

from redisq_django.conf import get_core_config, get_settings
from redisq_django.connection import get_broker
from redisq_django.consuming import inbox
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.consuming.db_hygiene import DjangoDatabaseMiddleware
from redisq_django.consuming.declarations import ConsumerDeclaration, declarations
from redisq_django.core import trends
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.handler import ConsumerSpec, Handler
from redisq_django.core.worker import Every, Middleware, Worker, WorkerOptions
from redisq_django.deadletters.sinking import sink_all
from redisq_django.publishing.outbox import relay_once
from redisq_django.schedules.job import schedule_job
from redisq_django.schedules.schedule_sync import sync_schedules

logger = logging.getLogger("redisq.worker")

#: Ignored overrides already reported by this process: (queue, consumer, note).
_reported: set[tuple[str, str, str]] = set()

#: How often a worker moves its consumers' dead letters into the database, seconds.
SINK_INTERVAL_S = 2.0
#: How often a worker relays outbox rows that were not sent at commit, seconds.
RELAY_INTERVAL_S = 1.0


class SelectionError(ConfigurationError):
    """The queues or consumers asked for are not declared."""


def select(queues: Sequence[str], consumers: Sequence[str] = ()) -> list[ConsumerDeclaration]:
    """The declarations of ``queues`` (narrowed to ``consumers`` when given).

    Raises:
        SelectionError: a queue has no declared consumer, or a named consumer does not
            exist on the selected queues; the message lists what is declared.
    """
    decls = declarations()
    by_queue: dict[str, list[ConsumerDeclaration]] = {}
    for d in decls:
        by_queue.setdefault(d.queue, []).append(d)
    known = ", ".join(sorted(by_queue)) or "none"
    for q in queues:
        if q not in by_queue:
            raise SelectionError(
                f"No consumer is declared for queue {q!r}. Queues with consumers: {known}. "
                "Declare one with @consumer in an app's consumers.py."
            )
    chosen = [d for q in queues for d in by_queue[q]]
    if consumers:
        names = {d.name for d in chosen}
        missing = [c for c in consumers if c not in names]
        if missing:
            raise SelectionError(
                f"No consumer named {', '.join(map(repr, missing))} on "
                f"{', '.join(queues)}. Declared there: {', '.join(sorted(names))}."
            )
        chosen = [d for d in chosen if d.name in consumers]
    return chosen


def load_specs(
    chosen: Sequence[ConsumerDeclaration], concurrency: int | None = None
) -> list[ConsumerSpec]:
    """Effective specs of ``chosen`` from their (synchronised) rows."""
    from redisq_django.models import Consumer

    handlers: dict[tuple[str, str], Handler] = {d.key: d.handler for d in chosen}
    priorities = {d.key: d.priority for d in chosen if d.priority is not None}
    shared_flow = {d.key: d.flow_queue for d in chosen if d.flow_queue is not None}
    ordered = {d.key: d.wait_replicas for d in chosen if d.ordered}
    config = get_core_config()
    rows = Consumer.objects.select_related("queue").filter(
        queue__name__in={d.queue for d in chosen}, name__in={d.name for d in chosen}
    )
    specs = []
    for row in rows:
        key = (row.queue.name, row.name)
        if key in handlers:
            _report_ignored(row, config)
            spec = row.to_spec(handlers[key], config)
            if concurrency is not None:
                spec = spec.evolve(concurrency=concurrency)
            if key in priorities:
                spec = spec.evolve(priority=priorities[key])
            if key in shared_flow:
                spec = spec.evolve(flow_queue=shared_flow[key])
            if key in ordered:
                spec = spec.evolve(ordered=True, wait_replicas=ordered[key])
            specs.append(spec)
    return sorted(specs, key=lambda s: s.key)


def _report_ignored(row: Any, config: Any) -> None:
    """Log, once per process, each invalid override of ``row`` the worker ignores (the
    admin refuses them; one may still be in the database from before, or from SQL)."""
    for field, eff in row.effective_all(config).items():
        seen = (row.queue.name, row.name, f"{field}: {eff.note}")
        if eff.note and seen not in _reported:
            _reported.add(seen)
            logger.error(
                "Consumer %s/%s: %s; %s=%s (%s) applies instead. Fix or clear the override "
                "in the admin (Redis queues → Consumers).",
                row.queue.name,
                row.name,
                eff.note,
                field,
                eff.value,
                eff.source,
            )


def build_worker(
    queues: Sequence[str],
    consumers: Sequence[str] = (),
    *,
    concurrency: int | None = None,
    options: WorkerOptions | None = None,
    metrics: bool = False,
) -> Worker:
    """A worker for the declared consumers of ``queues``, configuration from the DB.

    The rows (consumers and schedules) are synchronised with the code first; the worker
    re-reads them every ``refresh_interval`` seconds (pause, retries, concurrency changed
    in the admin) and evaluates the periodic schedules.
    ``concurrency`` (the ``--concurrency`` flag) wins over code and database. With
    ``metrics``, it counts into Prometheus metrics (``--metrics-port``); with
    ``REDISQ['TRACING']``, it traces each handler.
    """
    chosen = select(queues, consumers)
    sync_declarations()
    sync_schedules()
    specs = load_specs(chosen, concurrency)

    def refresh() -> list[ConsumerSpec]:
        close_old_connections()
        try:
            return load_specs(chosen, concurrency)
        finally:
            close_old_connections()

    pairs = [(d.queue, d.name) for d in chosen]
    broker = get_broker()
    periodic = [
        Every(
            "dead-letter sink", SINK_INTERVAL_S, _with_fresh_connections(lambda: sink_all(pairs))
        ),
        schedule_job(broker),  # every worker evaluates the schedules: no beat process
    ]
    inboxes = sorted({d.atomic for d in chosen if d.atomic})
    if inboxes:  # atomic=True consumers: their inbox rows past the retention go
        periodic.append(
            Every(
                "inbox prune",
                inbox.PRUNE_INTERVAL_S,
                _with_fresh_connections(lambda: [inbox.prune(db) for db in inboxes]),
            )
        )
    if get_settings()["OUTBOX"]:
        periodic.append(
            Every("outbox relay", RELAY_INTERVAL_S, _with_fresh_connections(relay_once))
        )
    if broker.config.trends:  # the backlog samples of the admin's charts, every queue's
        sampler = broker.operator.site_sampler()
        periodic.append(
            Every("trend samples", trends.SAMPLE_INTERVAL_S, sampler.tick, on_stop=sampler.release)
        )
    return Worker(
        broker,
        specs,
        options,
        middleware=[*worker_middleware(metrics=metrics), *handler_middleware(chosen)],
        refresh=refresh,
        periodic=periodic,
    )


def worker_middleware(*, metrics: bool = False) -> list[Middleware]:
    """The middleware of a worker: database hygiene; OpenTelemetry tracing when
    ``REDISQ['TRACING']`` is on; Prometheus counters with ``metrics``
    (``runconsumer --metrics-port``).

    Raises:
        MissingExtra: a library asked for is not installed (the message names the extra).
    """
    out: list[Middleware] = [DjangoDatabaseMiddleware()]
    if get_settings()["TRACING"]:
        from redisq_django.metrics import tracing as metrics_tracing

        tracing = metrics_tracing.get_tracing()
        if tracing.live():
            out.append(tracing)
        else:  # every span would be a no-op: cost nothing per message instead
            logger.warning(
                "REDISQ['TRACING'] is on, but this process has no OpenTelemetry SDK "
                "(no TracerProvider is set): handlers are not traced. Configure the SDK in "
                "your settings or an AppConfig.ready()."
            )
    if metrics:
        from redisq_django.metrics.prometheus import PrometheusMiddleware

        out.append(PrometheusMiddleware())
    return out


def handler_middleware(chosen: Sequence[ConsumerDeclaration]) -> list[Middleware]:
    """Worker middleware the handlers bring (``handler.worker_middleware``, as the tasks
    backend's handler does), each once."""
    found: dict[int, Middleware] = {}
    for d in chosen:
        mw = getattr(d.handler, "worker_middleware", None)
        if isinstance(mw, Middleware):
            found.setdefault(id(mw), mw)
    return list(found.values())


def _with_fresh_connections(task: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        close_old_connections()
        try:
            return task()
        finally:
            close_old_connections()

    return run
