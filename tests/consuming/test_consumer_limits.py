"""Flow control declared and changed where users do it (issue 34, points 1, 2 and 5):
``@consumer(rate=..., burst=..., rate_per_key=..., max_in_flight=..., time_limit=...)``
refuses what means nothing, the row keeps what code declared, the admin's overrides
(validated; ``0`` / ``"off"`` lift a limit) win, and what a worker runs with is what the
row says now (the refresh that applies admin changes without a restart)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from redisq_django.conf import get_core_config
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.consuming.declarations import consumer, registry
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.limits import Rate
from redisq_django.core.message import Message
from redisq_django.models import Consumer
from redisq_django.runner import load_specs

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited(queue_name: str) -> Iterator[None]:
    saved = dict(registry._declarations)

    @consumer(
        queue_name,
        name="billing",
        rate="20/s",
        burst=4,
        rate_per_key="2/s",
        max_in_flight=3,
        time_limit=30,
    )
    def billing(message: Message) -> None:
        pass

    @consumer(queue_name, name="email")
    def email(message: Message) -> None:
        pass

    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rate": "100"}, "is not a rate"),
        ({"rate": "100/d"}, "is not a rate"),
        ({"rate": "0/s"}, "at least 1 message per period"),
        ({"rate": "10/s", "burst": 0}, "burst"),
        ({"burst": 3}, "burst=3 needs a rate"),
        ({"rate_per_key": "x"}, "rate_per_key"),
        ({"max_in_flight": 0}, "max_in_flight must be an integer >= 1"),
        ({"max_in_flight": 2.5}, "max_in_flight must be an integer >= 1"),
        ({"time_limit": 0}, "time_limit"),
    ],
)
def test_the_decorator_refuses_limits_that_mean_nothing(
    queue_name: str, kwargs: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        consumer(queue_name, **kwargs)


def specs_by_name(queue_name: str) -> dict[str, Any]:
    declared = [d for d in registry.declarations() if d.queue == queue_name]
    return {s.name: s for s in load_specs(declared)}


@pytest.mark.usefixtures("limited")
def test_the_row_keeps_what_code_declares_and_the_worker_runs_with_it(queue_name: str) -> None:
    sync_declarations()
    row = Consumer.objects.get(queue__name=queue_name, name="billing")
    assert (row.declared_rate, row.declared_burst, row.declared_rate_per_key) == ("20/s", 4, "2/s")
    assert (row.declared_max_in_flight, row.declared_time_limit) == (3, 30)
    specs = specs_by_name(queue_name)
    billing, email = specs["billing"], specs["email"]
    assert billing.rate == Rate(20, 1, 4)
    assert billing.rate_per_key == Rate.parse("2/s")
    assert (billing.max_in_flight, billing.time_limit) == (3, 30)
    # A consumer that declares none has none
    assert (email.rate, email.rate_per_key, email.max_in_flight, email.time_limit) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.usefixtures("limited")
def test_admin_overrides_win_and_lift_the_codes_limits(queue_name: str) -> None:
    sync_declarations()
    row = Consumer.objects.get(queue__name=queue_name, name="billing")
    # When staff lower the rate, lift max_in_flight and the time limit, keep the rest
    row.rate, row.burst, row.max_in_flight, row.time_limit = "5/s", 1, 0, 0
    row.full_clean()
    row.save()
    spec = specs_by_name(queue_name)["billing"]
    assert spec.rate == Rate(5, 1, 1)
    assert spec.max_in_flight is None and spec.time_limit is None
    assert spec.rate_per_key == Rate.parse("2/s")  # the code's: not overridden
    effective = row.effective_all(get_core_config())
    assert (effective["rate"].value, effective["rate"].source) == ("5/s", "admin override")
    assert (effective["max_in_flight"].value, effective["max_in_flight"].source) == (
        None,
        "admin override",
    )
    # And "off" lifts a rate; the row keeps the code's values for when the override goes
    row.rate, row.rate_per_key = "off", "off"
    row.save()
    spec = specs_by_name(queue_name)["billing"]
    assert spec.rate is None and spec.rate_per_key is None
    sync_declarations()  # a deploy: overrides stay
    row.refresh_from_db()
    assert (row.rate, row.declared_rate) == ("off", "20/s")


@pytest.mark.usefixtures("limited")
@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("rate", "5/x", "is not a rate"),
        ("rate_per_key", "fast", "is not a rate"),
        ("burst", 0, "burst"),
        ("time_limit", -1, "time limit"),
    ],
)
def test_an_override_that_means_nothing_is_refused(
    queue_name: str, field: str, value: Any, needle: str
) -> None:
    sync_declarations()
    row = Consumer.objects.get(queue__name=queue_name, name="billing")
    setattr(row, field, value)
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    assert needle in str(refused.value.message_dict[field])


@pytest.mark.usefixtures("limited")
def test_an_invalid_override_in_the_database_is_ignored_and_the_code_applies(
    queue_name: str,
) -> None:
    # Given a bad rate written by other means than the admin (SQL, an old release)
    sync_declarations()
    Consumer.objects.filter(queue__name=queue_name, name="billing").update(rate="fast")
    row = Consumer.objects.get(queue__name=queue_name, name="billing")
    # Then the worker runs with the code's, and the admin says why
    assert specs_by_name(queue_name)["billing"].rate == Rate(20, 1, 4)
    note = row.effective_all(get_core_config())["rate"].note
    assert "override fast ignored" in note and "is not a rate" in note
