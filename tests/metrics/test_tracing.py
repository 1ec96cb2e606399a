"""OpenTelemetry tracing (the otel extra): every publish path carries W3C trace context in
the headers, and the worker runs each handler in a ``process`` span (CONSUMER) linked to
the span that sent (or created) the message, checked with the SDK's in-memory exporter
against the real redis-server."""

# ruff: noqa: F811  (test parameters named after the fixtures imported below)

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.db import transaction
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message, RetryPolicy
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.metrics.tracing import Tracing
from tests.support.tracing import GROUP, drain, global_exporter, spans  # noqa: F401


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(tracer_provider=provider)


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def test_publish_sends_in_a_producer_span_and_the_handler_runs_in_a_linked_consumer_span(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    # Given a broker with the tracing hook, and a request span around the publish
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    tracer = tracing._tracer  # the same provider: spans of the test go to the exporter
    with tracer.start_as_current_span("request") as request:
        message_id = broker.publish(queue_name, {"order": 1}, headers={"who": "me"})

    # When a worker handles it
    (handled,) = drain(broker, queue_name, tracing)

    # Then the send span is a PRODUCER child of the request, with the messaging attributes
    (send,) = spans(exporter, f"send {queue_name}")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "redisq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue_name,
    }
    # ...the message carried its context (and the caller's headers) as W3C traceparent
    assert handled.id == message_id
    assert handled.headers["who"] == "me"
    assert handled.headers["traceparent"] == traceparent_of(send)
    # ...and the handler ran in a CONSUMER span linked (not parented) to the send span
    (process,) = spans(exporter, f"process {queue_name}")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is None
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert [link.context.trace_id for link in process.links] == [send.context.trace_id]
    assert dict(process.attributes or {}) == {
        "messaging.system": "redisq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue_name,
        "messaging.consumer.group.name": GROUP,
        "messaging.message.id": message_id,
        "messaging.redisq.message.attempt": 1,
    }
    assert process.status.status_code is StatusCode.UNSET


def test_publish_many_carries_one_send_span_to_every_message(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(3)])

    handled = drain(broker, queue_name, tracing)

    (send,) = spans(exporter, f"send {queue_name}")
    assert (send.attributes or {})["messaging.batch.message_count"] == 3
    assert sorted(m.id for m in handled) == sorted(ids)
    assert {m.headers["traceparent"] for m in handled} == {traceparent_of(send)}
    processes = spans(exporter, f"process {queue_name}")
    assert len(processes) == 3
    assert {p.links[0].context.span_id for p in processes} == {send.context.span_id}
    # three handlings, three traces of their own
    assert len({p.context.trace_id for p in processes}) == 3


def test_a_message_prepared_now_and_sent_later_carries_a_create_span(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    # Given a message prepared (as publish_on_commit does) and sent later
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    envelope = broker.prepare(queue_name, {"n": 1}, id="fixed-id-1")
    broker.send([envelope])

    (handled,) = drain(broker, queue_name, tracing)

    # Then the create span (PRODUCER) is the one it carried and the process span links to
    (create,) = spans(exporter, f"create {queue_name}")
    assert create.kind is SpanKind.PRODUCER
    assert (create.attributes or {})["messaging.operation.type"] == "create"
    assert not spans(exporter, f"send {queue_name}")
    assert handled.headers["traceparent"] == traceparent_of(create)
    (process,) = spans(exporter, f"process {queue_name}")
    assert process.links[0].context.span_id == create.context.span_id


def test_a_failing_handler_marks_its_span_and_each_attempt_has_one(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    broker.publish(queue_name, {"fail": True})

    def fail(message: Message) -> None:
        raise ValueError("no such order")

    seen = drain(broker, queue_name, tracing, fail)

    # Then both attempts (max_retries 1) ran in a span with the error, both linked to
    # the one send span (a retry keeps the message's headers)
    assert [m.attempts for m in seen] == [1, 2]
    (send,) = spans(exporter, f"send {queue_name}")
    processes = spans(exporter, f"process {queue_name}")
    assert [(p.attributes or {})["messaging.redisq.message.attempt"] for p in processes] == [1, 2]
    for p in processes:
        assert p.status.status_code is StatusCode.ERROR
        assert (p.attributes or {})["error.type"] == "builtins.ValueError"
        assert [e.name for e in p.events] == ["exception"]
        assert p.links[0].context.span_id == send.context.span_id


def test_async_handlers_running_together_each_run_in_their_own_span(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    import asyncio

    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    ids = broker.publish_many(queue_name, [0.03, 0.01, 0.02])
    current: dict[str, list[int]] = {}

    async def handler(message: Message) -> None:
        # Started together on one thread, ending in another order than they started
        current[message.id] = [trace.get_current_span().get_span_context().span_id]
        await asyncio.sleep(message.payload)
        current[message.id].append(trace.get_current_span().get_span_context().span_id)
        if message.payload == 0.01:
            raise ValueError("the middle one fails")

    policy = RetryPolicy.from_seconds(
        max_retries=0, backoff=0.01, max_backoff=0.02, visibility_timeout=30
    )
    spec = ConsumerSpec(queue_name, GROUP, handler, policy=policy, start="earliest", concurrency=3)
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    assert Worker(broker, [spec], options, middleware=[tracing]).run() == 0

    # Then each handler ran in its own process span, current throughout (before and
    # after its await), and only the failing one's span has the error
    processes = {
        (p.attributes or {})["messaging.message.id"]: p
        for p in spans(exporter, f"process {queue_name}")
    }
    assert sorted(processes) == sorted(ids)
    for message_id, process in processes.items():
        assert current[message_id] == [process.context.span_id] * 2
    assert processes[ids[1]].status.status_code is StatusCode.ERROR
    assert processes[ids[0]].status.status_code is not StatusCode.ERROR
    assert processes[ids[2]].status.status_code is not StatusCode.ERROR


def test_the_callers_traceparent_wins_and_a_handler_span_is_a_child(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    # Given a message that already carries a trace context of its own
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    broker.publish(queue_name, {"n": 1}, headers={"traceparent": given})
    tracer = tracing._tracer

    def inner(message: Message) -> None:
        with tracer.start_as_current_span("inside handler"):
            pass

    (handled,) = drain(broker, queue_name, tracing, inner)

    # Then it keeps it, the process span links to it, and the handler's own span is a
    # child of the process span
    assert handled.headers["traceparent"] == given
    (process,) = spans(exporter, f"process {queue_name}")
    assert f"{process.links[0].context.span_id:016x}" == "b7ad6b7169203331"
    (child,) = spans(exporter, "inside handler")
    assert child.parent is not None and child.parent.span_id == process.context.span_id


def test_a_message_without_trace_context_is_processed_without_a_link(
    redis_client: redis.Redis, queue_name: str, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    # Given a message published by a producer without tracing (any client)
    Broker(redis_client).publish(queue_name, {"n": 1})
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    # (the consumer registered after the publish: start from the earliest entry)
    assert len(drain(broker, queue_name, tracing)) == 1
    (process,) = spans(exporter, f"process {queue_name}")
    assert process.links == ()


# -- through Django: settings.REDISQ["TRACING"], publish_on_commit, the outbox ----------


def tracing_hooks(broker: Any) -> list[Any]:
    """The broker's publish hooks but the one every broker of the app has (it registers
    the declared consumers at a queue's first publish: consuming/registration.py)."""
    from redisq_django.consuming.registration import FirstPublishHook

    return [h for h in broker.hooks if not isinstance(h, FirstPublishHook)]


def test_the_app_hands_the_broker_tracings_publish_hook_with_tracing_on_only(
    settings: Any, redis_url: str
) -> None:
    from redisq_django.connection import get_broker
    from redisq_django.metrics.tracing import get_tracing

    # connection.py knows no tracing: apps.ready() added tracing's hooks, asked each
    # time the broker is built (after every settings change)
    settings.REDISQ = {"URL": redis_url}
    assert tracing_hooks(get_broker()) == []
    settings.REDISQ = {"URL": redis_url, "TRACING": True}
    assert tracing_hooks(get_broker()) == [get_tracing()]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outbox", [False, True], ids=["on-commit", "outbox"])
def test_publish_on_commit_and_the_outbox_carry_the_context(
    settings: Any,
    redis_url: str,
    redis_client: redis.Redis,
    queue_name: str,
    global_exporter: InMemorySpanExporter,
    outbox: bool,
) -> None:
    from redisq_django import publish_on_commit
    from redisq_django.connection import get_broker
    from redisq_django.metrics.tracing import get_tracing

    settings.REDISQ = {"URL": redis_url, "TRACING": True, "OUTBOX": outbox}
    broker = get_broker()
    assert tracing_hooks(broker) == [get_tracing()]
    broker.consumers.ensure(queue_name, GROUP, "earliest")

    # When a message is published on commit inside a request span
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request, transaction.atomic():
        message_id = publish_on_commit(queue_name, {"order": 7})

    (handled,) = drain(broker, queue_name, get_tracing())

    # Then its create span belongs to the request's trace, and the handling links to it
    (create,) = spans(global_exporter, f"create {queue_name}")
    assert create.context.trace_id == request.get_span_context().trace_id
    assert handled.id == message_id
    assert handled.headers["traceparent"] == traceparent_of(create)
    (process,) = spans(global_exporter, f"process {queue_name}")
    assert process.links[0].context.span_id == create.context.span_id


def test_without_an_sdk_nothing_is_traced_but_a_current_context_passes_on(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given tracing with no SDK behind it (every span would be a no-op)
    noop = Tracing(tracer_provider=trace.NoOpTracerProvider())
    assert not noop.live()
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[noop])
    broker.consumers.ensure(queue_name, GROUP, "earliest")

    # When one message is published with no context, one inside a remote one
    broker.publish(queue_name, {"n": 1})
    remote = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
    )
    with trace.use_span(trace.NonRecordingSpan(remote)):
        broker.publish(queue_name, {"n": 2})
    handled = sorted(drain(broker, queue_name, noop), key=lambda m: m.payload["n"])

    # Then the first carries no trace header, the second the context it was given, and
    # both were handled (the worker side does nothing)
    assert "traceparent" not in handled[0].headers
    assert handled[1].headers["traceparent"] == (
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )


def test_a_worker_without_an_sdk_runs_no_tracing_middleware(
    settings: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from redisq_django.consuming.db_hygiene import DjangoDatabaseMiddleware
    from redisq_django.metrics import tracing as tracing_module
    from redisq_django.runner import worker_middleware

    # Given TRACING on in a process whose OpenTelemetry has no SDK
    settings.REDISQ = {"URL": redis_url, "TRACING": True}
    noop = Tracing(tracer_provider=trace.NoOpTracerProvider())
    monkeypatch.setattr(tracing_module, "get_tracing", lambda: noop)

    # When a worker's middleware is put together
    middleware = worker_middleware()

    # Then tracing is left out (it would cost per message and record nothing), and the
    # log says why and what to do
    assert [type(m) for m in middleware] == [DjangoDatabaseMiddleware]
    assert "no OpenTelemetry SDK" in caplog.text

    # ...while with an SDK it is there
    provider = TracerProvider()
    monkeypatch.setattr(tracing_module, "get_tracing", lambda: Tracing(tracer_provider=provider))
    assert [type(m) for m in worker_middleware()] == [DjangoDatabaseMiddleware, Tracing]
