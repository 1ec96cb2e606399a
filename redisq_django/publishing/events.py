"""Publishing model events (created, updated, deleted) after the transaction commits.

Declare once, e.g. in your app's ``AppConfig.ready()``::

    from redisq_django.publishing.events import publish_model_events

    publish_model_events(Order, queue="orders", on=("created", "updated"))

Each save or delete of an ``Order`` then publishes, after its transaction commits (never
on rollback), a message whose payload is ``payload(instance, event)`` — by default
``{"model": "shop.order", "pk": 42, "event": "created"}`` — with headers ``{"event":
..., "model": ...}``. The default payload deliberately carries only the key: consumers
read the current row, and nothing (passwords, personal data) leaks by accident. Pass
``payload=`` to send more, and ``key=`` to give each message an ordering key (a field
name, e.g. ``key="pk"``, or ``f(instance, event)``).

``QuerySet.update()``, ``bulk_create()`` and ``bulk_update()`` send no model signals,
so no events: call :func:`publish_bulk_events` with the affected objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models.signals import post_delete, post_save

from redisq_django.conf import check_queue_known
from redisq_django.connection import get_broker
from redisq_django.core.ids import new_message_id
from redisq_django.publishing import enqueue_on_commit, publish_on_commit

EVENTS = ("created", "updated", "deleted")
PayloadFunction = Callable[[Any, str], Any]
#: How a model event names its ordering key: a field (attribute) name, whose value as
#: text is the key, or ``f(instance, event)`` returning the key; None (either way): none.
KeySource = str | Callable[[Any, str], str | None]


def default_payload(instance: models.Model, event: str) -> dict[str, Any]:
    """``{"model": "<app_label>.<model>", "pk": <pk>, "event": <event>}``."""
    return {"model": instance._meta.label_lower, "pk": instance.pk, "event": event}


@dataclass(frozen=True)
class EventRegistration:
    model: type[models.Model]
    queue: str
    on: tuple[str, ...]
    payload: PayloadFunction
    key: KeySource | None = None

    def headers(self, event: str) -> dict[str, str]:
        return {"event": event, "model": self.model._meta.label_lower}

    def key_of(self, instance: Any, event: str) -> str | None:
        """The ordering key of ``instance``'s ``event`` message, or None."""
        if self.key is None:
            return None
        if isinstance(self.key, str):
            value = getattr(instance, self.key)
            return None if value is None else str(value)
        return self.key(instance, event)


_registrations: list[EventRegistration] = []


def publish_model_events(
    model: type[models.Model],
    *,
    queue: str,
    on: Sequence[str] = EVENTS,
    payload: PayloadFunction | None = None,
    key: KeySource | None = None,
) -> None:
    """Publish ``model``'s ``on`` events to ``queue`` after each transaction commits.

    Args:
        model: the model class (subclasses are not included).
        queue: where the events go.
        on: any of ``"created"``, ``"updated"``, ``"deleted"``.
        payload: ``f(instance, event)`` returning the JSON payload; default
            :func:`default_payload`. For ``deleted`` it runs while the instance still
            has its pk.
        key: each message's ordering key (``message.key``; an ordered consumer handles
            the messages of one key in order): the name of a field or attribute, whose value
            as text is the key (``key="pk"`` gives ``"42"``; a None value gives no key),
            or ``f(instance, event)`` returning the key or None. Default: no key. An
            invalid key (empty, over 256 bytes) raises ``InvalidKey`` at the save.

    Raises:
        ValueError: an unknown event name.
        TypeError: ``key`` is neither a str nor callable.
    """
    unknown = sorted(set(on) - set(EVENTS))
    if unknown:
        raise ValueError(f"Unknown model event(s) {unknown}; use {', '.join(EVENTS)}.")
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError(f"key must be a field name or f(instance, event), got {key!r}")
    registration = EventRegistration(model, queue, tuple(on), payload or default_payload, key)
    # Declaring the same model and queue again (e.g. ready() running again when the app
    # registry reloads) replaces the earlier declaration instead of doubling events.
    _registrations[:] = [r for r in _registrations if (r.model, r.queue) != (model, queue)]
    _registrations.append(registration)
    uid = f"redisq:{model._meta.label_lower}:{queue}"
    post_save.disconnect(sender=model, dispatch_uid=uid)
    post_delete.disconnect(sender=model, dispatch_uid=uid)
    if "created" in on or "updated" in on:
        post_save.connect(_make_on_save(registration), sender=model, weak=False, dispatch_uid=uid)
    if "deleted" in on:
        post_delete.connect(
            _make_on_delete(registration), sender=model, weak=False, dispatch_uid=uid
        )


def _publish(registration: EventRegistration, instance: Any, event: str, using: str) -> str:
    return publish_on_commit(
        registration.queue,
        registration.payload(instance, event),
        headers=registration.headers(event),
        using=using,
        key=registration.key_of(instance, event),
    )


def _make_on_save(registration: EventRegistration) -> Callable[..., None]:
    def on_save(
        sender: Any,
        instance: Any,
        created: bool,
        raw: bool = False,
        using: str = "default",
        **kwargs: Any,
    ) -> None:
        if raw:  # loaddata: fixtures are not events
            return
        event = "created" if created else "updated"
        if event in registration.on:
            _publish(registration, instance, event, using)

    return on_save


def _make_on_delete(registration: EventRegistration) -> Callable[..., None]:
    def on_delete(sender: Any, instance: Any, using: str = "default", **kwargs: Any) -> None:
        _publish(registration, instance, "deleted", using)

    return on_delete


def publish_bulk_events(
    objects: Iterable[models.Model], event: str, *, using: str = "default"
) -> list[str]:
    """Publish ``event`` for objects changed without signals (``bulk_create``,
    ``QuerySet.update()``...), to every queue registered for their model, after the
    transaction commits (with the transaction's other messages: one round trip per
    queue; through the outbox where it is enabled).

    Returns:
        The message ids.

    Raises:
        ValueError: an unknown event name.
        PayloadTooLarge, PayloadNotSerializable: a payload is refused (nothing is sent).
    """
    if event not in EVENTS:
        raise ValueError(f"Unknown model event {event!r}; use {', '.join(EVENTS)}.")
    objects = list(objects)
    broker = get_broker()
    envelopes = []
    for registration in _registrations:
        mine = [o for o in objects if type(o) is registration.model]
        if event not in registration.on or not mine:
            continue
        check_queue_known(registration.queue)
        # Validate every payload before anything is queued: all or none.
        envelopes += [
            broker.prepare(
                registration.queue,
                registration.payload(o, event),
                headers=registration.headers(event),
                id=new_message_id(),
                key=registration.key_of(o, event),
            )
            for o in mine
        ]
    for envelope in envelopes:
        enqueue_on_commit(envelope, using=using)
    return [e.id for e in envelopes if e.id is not None]
