"""Head sampling of ``process`` spans without asking the SDK for the spans it drops.

A handler's ``process`` span is a root span (it links to the send span, see
:mod:`~redisq_django.metrics.tracing`). Under the SDK's ratio samplers, a root span is kept
exactly when the low 64 bits of its trace id fall below the sampler's bound; asking the SDK
costs ~5 µs per message even for a span it drops, a third of what a no-op handler costs.

:class:`RatioShortcut` makes that draw itself, for the samplers whose decision on a root
span is nothing else: ``TraceIdRatioBased``, ``ParentBased`` over it (what
``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` builds) and ``ALWAYS_OFF``, with the SDK's
random trace ids. A kept message's trace id is handed to the SDK, which then records the
span as usual. A dropped message runs with a stand-in current span, which costs nothing
unless something asks for its context (a child span, a log record with trace ids, a
publish): it then gets the non-recording context the SDK would have made, with a trace id
of its own. The probability of keeping, and the trace ids on both sides, are those the SDK
would draw. With any other sampler or id generator, every span goes through the SDK.

What differs from the SDK: the SDK's own span-count metrics do not count dropped spans;
a context copied in a handler and used after it ended (a task left running) sees no span,
as outside any handler, rather than the dropped span's context.
"""

from __future__ import annotations

import functools
import random
import threading
from typing import Any

#: The trace id's bits a ratio sampler decides on (the SDK's ``TRACE_ID_LIMIT``).
LOW_BITS = 64

# The SDK's RandomIdGenerator draws from the same generator.
_getrandbits = random.getrandbits


class RatioShortcut:
    """Draws the sampling decision of each handled message's root span.

    Build with :meth:`of`; call :meth:`drop` in the handler's thread before the handler
    runs and, when it returned True, :meth:`release` after.
    """

    def __init__(self, tracer: Any, bound: int) -> None:
        from opentelemetry import context, trace

        self._get_current = context.get_current
        self._attach = context.attach
        self._stand_in = _stand_in_class()
        ids = tracer.id_generator
        if not isinstance(ids, _ChosenIds):
            ids = tracer.id_generator = _ChosenIds(ids)
        self._ids = ids
        self._bound = bound
        # Trace context level 2 flags random trace ids (SDKs since 1.40 or so).
        random_flag = getattr(trace.TraceFlags, "RANDOM_TRACE_ID", 0)
        is_random = getattr(ids, "is_trace_id_random", None)
        self._flags = trace.TraceFlags(random_flag if is_random and is_random() else 0)
        self._local = _ThreadStandIn()

    @classmethod
    def of(cls, tracer: Any) -> RatioShortcut | None:
        """The shortcut for ``tracer`` (an SDK tracer), or None when its sampler or id
        generator is one whose decisions only the SDK can make."""
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        ids = getattr(tracer, "id_generator", None)
        base = ids.base if isinstance(ids, _ChosenIds) else ids
        if type(base) is not RandomIdGenerator:  # e.g. X-Ray's ids carry a timestamp
            return None
        bound = _keep_bound(getattr(tracer, "sampler", None))
        return None if bound is None else cls(tracer, bound)

    def drop(self) -> bool:
        """Decide on the next message's span, in the thread that will run its handler.

        Returns:
            True when the sampler would drop it: the thread's stand-in is its current span
            until :meth:`release`. False when the SDK is to make the span: if it is a root
            span, the SDK's next trace id in this thread is one the sampler keeps.
        """
        stand_in = self._local.stand_in
        if stand_in is None:
            stand_in = self._adopt()
            if stand_in is None:
                return False
        if self._get_current() is not stand_in.context:
            return False  # someone else's span is current: the SDK decides from it
        low = _getrandbits(LOW_BITS)
        if low < self._bound:
            self._ids.choose((_getrandbits(128 - LOW_BITS) << LOW_BITS) | low)
            return False
        stand_in.low = low  # not a method: a call costs a fifth of all this
        return True

    def release(self) -> None:
        """The dropped message's handler returned: the stand-in is no span again."""
        stand_in = self._local.stand_in
        if stand_in is not None:
            stand_in.leave()

    def _adopt(self) -> Any:
        # The stand-in stays current in this thread from now on, reading as no span
        # between messages: attaching it once costs less than once per message.
        from opentelemetry import trace

        if trace.get_current_span().get_span_context().is_valid:
            return None  # a span is current around the handlers: ParentBased follows it
        stand_in = self._stand_in(self._flags)
        stand_in.context = trace.set_span_in_context(stand_in)
        self._attach(stand_in.context)
        self._local.stand_in = stand_in
        return stand_in


def _keep_bound(sampler: Any) -> int | None:
    """Below which value of a root span's low trace-id bits ``sampler`` keeps it; None if
    it decides on anything else."""
    from opentelemetry.sdk.trace import sampling

    if isinstance(sampler, sampling.ParentBased):
        if type(sampler).should_sample is not sampling.ParentBased.should_sample:
            return None
        sampler = getattr(sampler, "_root", None)  # what ParentBased asks for a root span
    if sampler is sampling.ALWAYS_OFF:
        return 0
    decides = getattr(type(sampler), "should_sample", None)
    if isinstance(sampler, sampling.TraceIdRatioBased) and (
        decides is sampling.TraceIdRatioBased.should_sample
    ):
        return int(sampler.bound)
    return None


class _ThreadStandIn(threading.local):
    # Class attributes: a thread's first look finds them without an AttributeError.
    stand_in: Any = None


class _ChosenIds:
    """The SDK tracer's id generator, which hands out a chosen trace id once per thread."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self._local = _ThreadChosen()

    def choose(self, trace_id: int) -> None:
        self._local.chosen = trace_id or 1  # 0 is the invalid trace id (p = 2**-128)

    def generate_trace_id(self) -> int:
        local = self._local
        chosen = local.chosen
        if chosen:
            local.chosen = 0
            return chosen
        return int(self.base.generate_trace_id())

    def generate_span_id(self) -> int:
        return int(self.base.generate_span_id())

    def __getattr__(self, name: str) -> Any:  # is_trace_id_random, and any newer method
        return getattr(self.base, name)


class _ThreadChosen(threading.local):
    chosen = 0  # none


@functools.cache
def _stand_in_class() -> type:
    # Defined on first use: the class derives from the API's, an optional dependency.
    from opentelemetry import context, trace

    class _StandIn(trace.NonRecordingSpan):
        """The current span of a dropped message's handler; no span between handlers."""

        def __init__(self, flags: trace.TraceFlags) -> None:
            super().__init__(trace.INVALID_SPAN_CONTEXT)
            self._flags = flags
            #: The low bits of the trace id of the message that runs; None between messages.
            self.low: int | None = None
            self._made: trace.SpanContext | None = None
            #: The context in which it is the current span (attached in its thread).
            self.context: context.Context | None = None

        def leave(self) -> None:
            self.low = None
            self._made = None

        def get_span_context(self) -> trace.SpanContext:
            made = self._made
            if made is None:
                low = self.low
                if low is None:
                    return trace.INVALID_SPAN_CONTEXT
                # What the SDK makes for a dropped root span, from the same draws.
                made = self._made = trace.SpanContext(
                    (_getrandbits(128 - LOW_BITS) << LOW_BITS) | low or 1,
                    _getrandbits(64) or 1,
                    is_remote=False,
                    trace_flags=self._flags,
                )
            return made

    return _StandIn
