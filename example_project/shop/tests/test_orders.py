"""The shop's consumers, task and schedule, tested with pytest and the ``redisq`` fixture
(docs/howto/testing.md shows this file)."""

import logging
from decimal import Decimal

import pytest
from django.tasks import TaskResultStatus

from redisq_django import publish
from redisq_django.testing import capture, drain
from shop.demo_data import posting
from shop.models import Order
from shop.tasks import order_summary

pytestmark = pytest.mark.django_db  # the handlers use the database


# -- what is published ---------------------------------------------------------------------


def test_a_new_order_is_published_to_orders(redisq):
    with capture() as published:  # runs the on-commit callbacks of the block
        order = Order.objects.create(email="ada@example.com", total=Decimal("12.50"))

    (message,) = published
    assert message.queue == "orders"
    assert message.payload == {"order": order.pk, "total": "12.50", "event": "created"}
    assert message.delay is None


# -- one test per consumer -----------------------------------------------------------------


def test_billing_bills_each_order_once(redisq):
    with capture():
        order = Order.objects.create(email="ada@example.com", total=Decimal("12.50"))

    result = drain("orders")

    order.refresh_from_db()
    assert order.billed_at is not None
    assert result[("orders", "billing")].handled == 1


def test_email_confirms_the_order(redisq):
    with capture():
        order = Order.objects.create(email="ada@example.com", total=Decimal("12.50"))

    drain("orders")

    order.refresh_from_db()
    assert order.confirmed_at is not None


def test_a_large_order_fails_the_fraud_check_and_becomes_a_dead_letter(redisq):
    with capture():
        order = Order.objects.create(email="mallory@example.com", total=Decimal("5000"))

    result = drain("orders")  # the retries are delivered at once: no backoff waited

    assert result[("orders", "fraud-check")].dead == 1
    (letter,) = redisq.dead_letters("orders", "fraud-check")
    assert letter.payload["order"] == order.pk
    assert letter.attempts == 3  # max_retries=2, plus the first attempt
    assert letter.error_class == "SuspiciousOrder"
    order.refresh_from_db()
    assert order.fraud_checked_at is None
    assert order.billed_at is not None  # the other consumers were not held up


def test_postings_book_a_customers_postings_in_order_past_a_refund_that_dies(redisq, caplog):
    order = Order.objects.create(email="ada@example.com", total=Decimal("12.50"))
    ledger = [("charge", "12.50"), ("refund", "125.00"), ("refund", "2.50"), ("charge", "1.00")]
    for kind, amount in ledger:
        publish("ledger", posting(order.pk, amount, kind), key=order.email)

    with caplog.at_level(logging.INFO, logger="shop"):
        result = drain("ledger")  # the refund's retries are delivered at once

    assert result[("ledger", "postings")].handled == 3
    (letter,) = redisq.dead_letters("ledger", "postings")
    assert letter.error_class == "LedgerMismatch"
    assert letter.attempts == 9  # max_retries=8, plus the first attempt
    booked = [r.getMessage().split(" booked")[0] for r in caplog.records if "booked" in r.message]
    assert booked == ["charge of 12.50", "refund of 2.50", "charge of 1.00"]  # in order


# -- the schedule and the task -------------------------------------------------------------


def test_restock_gets_each_tick_of_the_stock_check_schedule(redisq):
    message_id = redisq.fire_schedule("stock-check")  # its next tick, without waiting

    result = drain("stock")

    assert result[("stock", "restock")].handled == 1
    assert [m.id for m in redisq.published.to("stock")] == [message_id]


def test_order_summary_ends_successful(redisq):
    Order.objects.create(email="ada@example.com", total=Decimal("12.50"))
    task_result = order_summary.enqueue("EUR")

    drain("default")  # the Django task queue "default"

    task_result.refresh()
    assert task_result.status == TaskResultStatus.SUCCESSFUL
    assert task_result.return_value == {"orders": 1, "total": "12.50 EUR", "billed": 0}
