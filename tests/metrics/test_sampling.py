"""Head sampling of ``process`` spans by the shortcut (``metrics.sampling``): under the SDK's
ratio samplers a worker keeps the sampler's share of spans, each complete and with a trace
id the sampler itself keeps; the handler of a dropped message still runs in a
non-recording span of its own, as with the SDK; every other sampler is left to the SDK.
Real redis-server, real SDK, in-memory exporter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)

from redisq_django.core import Broker, CoreConfig, Message
from redisq_django.core.worker import Middleware
from redisq_django.metrics.sampling import RatioShortcut
from redisq_django.metrics.tracing import Tracing
from tests.support.tracing import GROUP, drain, spans

LOW = (1 << 64) - 1


def traced(sampler: Sampler, **provider: Any) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=sampler, **provider)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(tracer_provider=tracer_provider), exporter


class Seen:
    """What each handler saw as its current span, and the span it opened inside."""

    def __init__(self, tracing: Tracing) -> None:
        self.contexts: dict[str, trace.SpanContext] = {}
        self.recording: dict[str, bool] = {}
        self._tracer = tracing._tracer
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        current = trace.get_current_span()
        with self._lock:
            self.contexts[message.id] = current.get_span_context()
            self.recording[message.id] = current.is_recording()
        with self._tracer.start_as_current_span("inside handler"):
            pass


def test_a_ratio_sampler_keeps_its_share_and_a_dropped_handler_runs_in_a_span_of_its_own(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a worker traced under ParentBased(TraceIdRatioBased(0.25)), three handler
    # threads, and 2,000 messages published with tracing
    tracing, exporter = traced(ParentBasedTraceIdRatio(0.25))
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    ids = {broker.publish(queue_name, {"n": n}) for n in range(2000)}
    seen = Seen(tracing)
    asked: list[str] = []  # the spans the SDK was asked for
    sdk_start_span = tracing._tracer.start_span

    def start_span(name: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(name)
        return sdk_start_span(name, *args, **kwargs)

    tracing._tracer.start_span = start_span  # type: ignore[method-assign]

    # When it drains them
    handled = drain(broker, queue_name, tracing, seen, concurrency=3)

    # Then every message ran once
    assert sorted(m.id for m in handled) == sorted(ids)
    # ...about a quarter of the process spans were recorded (binomial, 6 sigma: 384..616)
    processes = spans(exporter, f"process {queue_name}")
    kept = {s.attributes["messaging.message.id"]: s for s in processes}
    assert 384 <= len(kept) <= 616, len(kept)
    # ...and the SDK was asked for those only: the shortcut dropped the others itself
    assert asked.count(f"process {queue_name}") == len(kept)
    bound = TraceIdRatioBased(0.25).bound
    sent = {s.context.span_id for s in spans(exporter, f"send {queue_name}")}
    children = {s.parent.span_id for s in spans(exporter, "inside handler") if s.parent}
    for message_id, span in kept.items():
        # ...each complete, with a trace id the sampler keeps, current in its handler
        assert span.kind is trace.SpanKind.CONSUMER and span.parent is None
        assert span.attributes["messaging.consumer.group.name"] == GROUP
        assert span.context.trace_id & LOW < bound
        assert span.context.trace_flags.sampled
        assert seen.recording[message_id]
        assert seen.contexts[message_id] == span.context
        assert span.context.span_id in children  # the handler's span is its child
        # ...linked to the message's send span (recorded or not: the headers carry it)
        (link,) = span.links
        assert link.context.span_id in sent or not link.context.trace_flags.sampled
    assert len({s.context.trace_id for s in kept.values()}) == len(kept)
    # ...and each dropped message's handler ran in a valid, non-recording span of its own,
    # with a trace id the sampler drops, so the span it opened was not recorded either
    dropped = ids - kept.keys()
    for message_id in dropped:
        context = seen.contexts[message_id]
        assert context.is_valid and not context.trace_flags.sampled
        assert not seen.recording[message_id]
        assert context.trace_id & LOW >= bound
    assert len({seen.contexts[m].trace_id for m in dropped}) == len(dropped)
    assert len(spans(exporter, "inside handler")) == len(kept)


def test_a_dropped_handler_passes_its_own_context_on(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a worker whose sampler drops everything, and a handler that publishes
    tracing, exporter = traced(ParentBased(ALWAYS_OFF))
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20), hooks=[tracing])
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    follow_up = f"{queue_name}.next"
    broker.consumers.ensure(follow_up, GROUP, "earliest")
    for n in range(20):
        broker.publish(queue_name, {"n": n})
    in_handler: dict[str, int] = {}

    def handler(message: Message) -> None:
        in_handler[message.id] = trace.get_current_span().get_span_context().trace_id
        broker.publish(follow_up, {"after": message.id})

    # When it drains them, then the follow-ups
    drain(broker, queue_name, tracing, handler)
    after = drain(broker, follow_up, tracing)

    # Then nothing was recorded, and each follow-up carries its handler's (dropped) trace
    assert exporter.get_finished_spans() == ()
    assert len(after) == 20
    for message in after:
        trace_id = int(message.headers["traceparent"].split("-")[1], 16)
        assert trace_id == in_handler[message.payload["after"]]
        assert message.headers["traceparent"].endswith(("-00", "-02"))  # not sampled
    assert len(set(in_handler.values())) == 20


class Outer(Middleware):
    """A middleware before tracing that runs each handler inside a span of its own."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._local = threading.local()

    def before_process(self, message: Message) -> None:
        self._local.used = trace.use_span(self._tracer.start_span("outer"), end_on_exit=True)
        self._local.used.__enter__()

    def after_process(self, message: Message, *, error: BaseException | None) -> None:
        self._local.used.__exit__(None, None, None)


def test_a_span_current_around_the_handler_leaves_the_decision_to_the_sdk(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a sampler that keeps almost no root span, and a middleware that opens a
    # (recorded) span around each handler before tracing runs
    tracing, exporter = traced(ParentBasedTraceIdRatio(0.0001))
    outer_provider = TracerProvider()
    outer_exporter = InMemorySpanExporter()
    outer_provider.add_span_processor(SimpleSpanProcessor(outer_exporter))
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    for n in range(50):
        broker.publish(queue_name, {"n": n})

    # When a worker drains them
    outer = Outer(outer_provider.get_tracer("outer"))
    assert len(drain(broker, queue_name, tracing, before=[outer])) == 50

    # Then ParentBased followed the sampled parent: every process span is its child
    processes = spans(exporter, f"process {queue_name}")
    assert len(processes) == 50
    outers = {s.context.span_id for s in outer_exporter.get_finished_spans()}
    assert {p.parent.span_id for p in processes if p.parent} == outers


class Custom(Sampler):
    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return "Custom"


class CustomRatio(TraceIdRatioBased):
    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE)


class CountingIds(RandomIdGenerator):
    pass


@pytest.mark.parametrize(
    ("sampler", "expected"),
    [
        (TraceIdRatioBased(0.5), TraceIdRatioBased(0.5).bound),
        (ParentBased(TraceIdRatioBased(0.01)), TraceIdRatioBased(0.01).bound),
        (ParentBasedTraceIdRatio(0.1), TraceIdRatioBased(0.1).bound),
        (ALWAYS_OFF, 0),
        (ParentBased(ALWAYS_OFF), 0),
        (ALWAYS_ON, None),
        (ParentBased(ALWAYS_ON), None),  # the SDK's default: every span recorded
        (Custom(), None),
        (ParentBased(Custom()), None),
        (CustomRatio(0.5), None),
    ],
)
def test_the_shortcut_takes_only_samplers_that_decide_on_the_trace_id(
    sampler: Sampler, expected: int | None
) -> None:
    tracer = TracerProvider(sampler=sampler).get_tracer("t")
    shortcut = RatioShortcut.of(tracer)
    if expected is None:
        assert shortcut is None
    else:
        assert shortcut is not None and shortcut._bound == expected


def test_an_id_generator_of_its_own_leaves_every_decision_to_the_sdk() -> None:
    tracer = TracerProvider(sampler=TraceIdRatioBased(0.5), id_generator=CountingIds())
    assert RatioShortcut.of(tracer.get_tracer("t")) is None


def test_a_parent_based_sampler_built_otherwise_than_we_know_leaves_it_to_the_sdk() -> None:
    # (a later SDK that keeps its root sampler elsewhere)
    sampler = ParentBased(TraceIdRatioBased(0.5))
    del sampler._root
    assert RatioShortcut.of(TracerProvider(sampler=sampler).get_tracer("t")) is None


GLOBAL_PROVIDER = textwrap.dedent(
    """
    import sys, redis
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
    from redisq_django.core import Broker, ConsumerSpec
    from redisq_django.core.worker import Worker, WorkerOptions
    from redisq_django.metrics.tracing import Tracing

    url, queue = sys.argv[1:]
    tracing = Tracing()  # built before the application sets its provider, as in Django
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.5))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    broker = Broker(redis.Redis.from_url(url))
    broker.consumers.ensure(queue, "g", "earliest")
    broker.publish_many(queue, [{"n": n} for n in range(1000)])
    spec = ConsumerSpec(queue, "g", lambda m: None, start="earliest")
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    assert Worker(broker, [spec], options, middleware=[tracing]).run() == 0
    print(tracing._shortcut is not None, len(exporter.get_finished_spans()))
    """
)


@pytest.mark.slow  # a fresh Python process
def test_the_global_provider_set_after_tracing_was_built_gets_the_shortcut(
    redis_url: str, queue_name: str
) -> None:
    # Given a process whose global provider (a 50 % ratio sampler) is set after the
    # Tracing object was built, as Django settings and AppConfig.ready() do
    out = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER, redis_url, queue_name],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    # Then its worker used the shortcut, and about half of 1,000 spans were recorded
    # (binomial, 6 sigma: 405..595)
    assert out[0] == "True"
    assert 405 <= int(out[1]) <= 595, out
