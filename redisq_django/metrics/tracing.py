"""OpenTelemetry tracing of publishing and handling, by the messaging conventions.

:class:`Tracing` is both a publish hook (the broker's) and a worker middleware:

* ``publish`` / ``publish_many`` run in a ``send {queue}`` span (kind PRODUCER) that
  covers encoding and the Redis round trip; every message it sends carries that span's
  context in its headers (``traceparent``, ``tracestate``: W3C trace context, or whatever
  propagators the application configured).
* A message prepared now and sent later (``publish_on_commit``, model events, the outbox,
  anything calling ``Broker.prepare``) gets a ``create {queue}`` span (PRODUCER) at that
  moment, in the caller's trace, and carries its context: the send happens after the
  commit, outside the caller's code, as the conventions' "create" operation describes.
* The worker runs each handler in a ``process {queue}`` span (kind CONSUMER) linked to the
  context the message carries. A link, not a parent: a message may be handled long after,
  several times (retries, re-drives, replays) and by several logical consumers, and each
  handling is a trace of its own. The span is current while the handler runs, so the
  handler's own spans (database, HTTP...) are its children.

Headers that already carry a ``traceparent`` keep it: the caller's context wins. Tracing
never makes a publish or a handler fail: its own errors are logged.

Under the SDK's ratio samplers, a ``process`` span the sampler drops is decided without
asking the SDK (:mod:`~redisq_django.metrics.sampling`): ~0.5 µs rather than ~12 µs.

The API only is needed (the ``otel`` extra); the application installs and configures the
SDK (a ``TracerProvider`` with its exporters, in settings or ``AppConfig.ready``). Without
one, the spans are no-ops.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from redisq_django.conf import get_settings
from redisq_django.core.delivery import Delivery
from redisq_django.core.hooks import PublishHook
from redisq_django.core.worker import Middleware
from redisq_django.metrics import extras

logger = logging.getLogger("redisq.tracing")

#: ``messaging.system``: not one of the conventions' well-known values, so our own name.
SYSTEM = "redisq"
#: The headers W3C trace context uses.
TRACE_HEADERS = ("traceparent", "tracestate")

#: Without an SDK, how often :meth:`Tracing.live` looks again for one (seconds).
LIVE_RECHECK_S = 1.0

# The span of a publish()/publish_many() in progress in this context, if any: messages
# prepared inside it carry its context rather than a create span of their own.
_sending: contextvars.ContextVar[Any] = contextvars.ContextVar("redisq_sending", default=None)


class Tracing(Middleware, PublishHook):
    """Traces publishing (a broker hook) and handling (a worker middleware).

    Args:
        tracer_provider: where spans go (default: OpenTelemetry's global provider).

    Raises:
        MissingExtra: opentelemetry-api is not installed.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        trace = extras.opentelemetry_trace()
        from opentelemetry import context, propagate

        self._trace = trace
        self._context = context
        self._propagate = propagate
        self._tracer = trace.get_tracer("redisq_django", tracer_provider=tracer_provider)
        self._provider = tracer_provider
        self._live = False
        self._recheck_at = 0.0
        # The running span per context: per thread, and per asyncio task for async
        # handlers, which run together on one thread (core/worker/coroutines.py).
        self._running: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
            f"redisq_running_span_{id(self)}", default=None
        )
        self._shortcut: Any = None

    def live(self) -> bool:
        """Whether spans are recorded: an SDK's tracer provider is in place (explicitly, or
        set globally, possibly after this object was built).

        Without one every span would be a no-op, yet extracting the context and opening
        a span per message costs several microseconds: the hooks then skip it all (and
        publishing only passes on a context that is current, as the API would). A
        provider set later is noticed within :data:`LIVE_RECHECK_S`.
        """
        if self._live:
            return True
        now = time.monotonic()
        if now < self._recheck_at:  # looking up the provider costs a microsecond or two
            return False
        self._recheck_at = now + LIVE_RECHECK_S
        trace = self._trace
        provider = self._provider or trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return False
        self._tracer = provider.get_tracer("redisq_django")  # the SDK's, not a proxy
        self._shortcut = _shortcut(self._tracer)
        self._live = True  # a global provider is set once and for all
        return True

    # -- publishing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def sending(self, queue: str, count: int) -> Iterator[None]:
        if not self.live():
            yield
            return
        attributes: dict[str, Any] = _attributes("send", queue)
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        with self._tracer.start_as_current_span(
            f"send {queue}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes
        ) as span:
            token = _sending.set(span)
            try:
                yield
            finally:
                _sending.reset(token)

    def before_prepare(
        self, queue: str, headers: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        if headers is not None and not isinstance(headers, Mapping):
            return headers  # the codec refuses it, with its own message
        if headers and "traceparent" in headers:
            return headers
        carrier = dict(headers or {})
        try:
            if _sending.get() is not None or not self.live():
                # inside publish(): the send span is current; no SDK: whatever is current
                self._propagate.inject(carrier)
            else:
                with self._tracer.start_as_current_span(
                    f"create {queue}",
                    kind=self._trace.SpanKind.PRODUCER,
                    attributes=_attributes("create", queue),
                ):
                    self._propagate.inject(carrier)
        except Exception:
            logger.exception("Could not add the trace context to a message of %s", queue)
            return headers
        return carrier or headers

    # -- handling ------------------------------------------------------------------------

    def before_process(self, delivery: Delivery) -> None:
        shortcut = self._shortcut  # only once live
        if shortcut is not None and shortcut.drop():
            return  # the sampler would drop this span: see metrics.sampling
        if not self._live and not self.live():
            return
        trace = self._trace
        attributes = _attributes("process", delivery.queue)
        attributes["messaging.consumer.group.name"] = delivery.consumer
        attributes["messaging.message.id"] = delivery.id
        attributes["messaging.redisq.message.attempt"] = delivery.attempts
        span = self._tracer.start_span(
            f"process {delivery.queue}", kind=trace.SpanKind.CONSUMER, attributes=attributes
        )
        # The link after the start: a span the sampler dropped skips extracting it (a
        # few microseconds per message).
        if delivery.headers and span.is_recording():
            sent = trace.get_current_span(self._propagate.extract(delivery.headers))
            span_context = sent.get_span_context()
            if span_context.is_valid:
                span.add_link(span_context)
        token = self._context.attach(trace.set_span_in_context(span))
        self._running.set((span, token))

    def after_process(self, delivery: Delivery, *, error: BaseException | None) -> None:
        running = self._running.get()
        if running is None:  # a dropped span, or before_process failed (and was logged)
            if self._shortcut is not None:
                self._shortcut.release()
            return
        self._running.set(None)
        span, token = running
        try:
            if error is not None:
                kind = type(error)
                span.set_attribute("error.type", f"{kind.__module__}.{kind.__qualname__}")
                span.record_exception(error)
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, repr(error)))
        finally:
            self._context.detach(token)
            span.end()


@functools.cache
def get_tracing() -> Tracing:
    """The process's :class:`Tracing` (publish hook and worker middleware), on
    OpenTelemetry's global tracer provider.

    Raises:
        MissingExtra: opentelemetry-api is not installed.
    """
    return Tracing()


def publish_hooks() -> list[PublishHook]:
    """The broker's publish hooks from tracing: :func:`get_tracing` with
    ``REDISQ['TRACING']``, none without (``apps.ready()`` hands this to
    ``connection.add_publish_hooks``).

    Raises:
        MissingExtra: ``TRACING`` is on but opentelemetry-api is not installed.
    """
    return [get_tracing()] if get_settings()["TRACING"] else []


def _shortcut(tracer: Any) -> Any:
    """The sampling shortcut for ``tracer``, if its SDK allows one."""
    try:
        from redisq_django.metrics.sampling import RatioShortcut

        return RatioShortcut.of(tracer)
    except ImportError:  # the OpenTelemetry SDK is not installed: another implementation
        return None
    except Exception:  # an SDK unlike the ones we know: it is asked for every span
        logger.exception("Tracing: no sampling shortcut; the SDK decides on every span")
        return None


def _attributes(operation: str, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
    }
