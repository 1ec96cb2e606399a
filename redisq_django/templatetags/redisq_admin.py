"""Template tags of the admin pages: figures with their help text, unknown figures as
unknown, state badges, text another client wrote shown visibly (``{% load redisq_admin %}``)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from redisq_django import figures
from redisq_django.core.stats import ConsumerStats
from redisq_django.core.wire import visible as visible_text

register = template.Library()


@register.filter
def visible(value: Any) -> str:
    """``value`` as text whose invisible and direction-changing characters show as
    escapes (``core.wire.visible``); escaped as HTML like any other text."""
    return visible_text("" if value is None else str(value))


@register.filter
def breakable(name: Any) -> SafeString:
    """A queue or consumer name that wraps only after ``.`` ``-`` ``_`` ``/`` ``:``
    (:func:`redisq_django.figures.breakable`)."""
    return figures.breakable(name)


@register.filter
def pattern(error_key: str) -> SafeString:
    """A cause's normalised error message, its placeholders marked (:func:`figures.pattern`)."""
    return figures.pattern(error_key)


@register.simple_tag(name="help")
def help_text(key: str) -> str:
    """The help text of figure ``key`` (for a ``title``)."""
    return str(figures.HELP[key])


@register.simple_tag
def figure(value: Any, key: str) -> SafeString:
    return figures.figure(value, key)


@register.simple_tag
def backlog(waiting: Any, held_back: Any = 0) -> SafeString:
    return figures.backlog(waiting, held_back or 0)


@register.simple_tag
def unknown() -> SafeString:
    return figures.unknown()


@register.simple_tag
def absent() -> SafeString:
    return figures.absent()


@register.simple_tag
def badge(state: str) -> SafeString:
    return figures.badge(state)


@register.simple_tag
def age(seconds: float | None) -> SafeString:
    return figures.figure(figures.age(seconds), "oldest_unacked")


@register.simple_tag
def instances(stats: ConsumerStats | None) -> SafeString:
    """A consumer's instances alive (worker processes) and threads (:func:`figures.instances`)."""
    if stats is None:
        return figures.unknown()
    return figures.instances(len(stats.workers), stats.stalled, stats.instances_alive)


@register.simple_tag
def dead(rows: int, in_redis: int | None) -> SafeString:
    return figures.dead_cell(rows, in_redis)


@register.filter
def total(stats: Any, figure_name: str) -> int:
    """A queue's figure summed over its consumers (``QueueStats.total``)."""
    return int(stats.total(figure_name))


@register.simple_tag
def moment(ms: int | None) -> SafeString:
    """A time as ``12s ago`` / ``in 4.0m``, its date and time as the title."""
    return figures.moment(ms)


@register.filter
def clock(when: Any) -> SafeString:
    """A time as every table of the console shows it (:func:`figures.clock`): 24-hour,
    ``22:22:05`` today, with its date another day."""
    return figures.clock(when)
