"""What the tracing tests share (the otel extra): a burst worker run with the tracing
middleware, the finished spans of one name, and an in-memory exporter on OpenTelemetry's
global provider."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from redisq_django.core import Broker, ConsumerSpec, Message, RetryPolicy
from redisq_django.core.worker import Middleware, Worker, WorkerOptions
from redisq_django.metrics.tracing import Tracing

#: The logical consumer :func:`drain` runs.
GROUP = "billing"


def drain(
    broker: Broker,
    queue: str,
    tracing: Tracing,
    handler: Any = None,
    *,
    concurrency: int = 1,
    before: Sequence[Middleware] = (),
) -> list[Message]:
    """Run a burst worker with the tracing middleware (after ``before``, with
    ``concurrency`` handler threads); the messages its handler saw."""
    seen: list[Message] = []
    lock = threading.Lock()

    def record(message: Message) -> None:
        with lock:
            seen.append(message)
        if handler is not None:
            handler(message)

    policy = RetryPolicy.from_seconds(
        max_retries=1, backoff=0.01, max_backoff=0.02, visibility_timeout=30
    )
    spec = ConsumerSpec(
        queue, GROUP, record, policy=policy, start="earliest", concurrency=concurrency
    )
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    assert Worker(broker, [spec], options, middleware=[*before, tracing]).run() == 0
    return seen


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


@pytest.fixture
def global_exporter() -> Iterator[InMemorySpanExporter]:
    """OpenTelemetry's global provider (set once per process), exporting to memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    try:
        yield exporter
    finally:
        processor.shutdown()  # no more spans go to this test's exporter
