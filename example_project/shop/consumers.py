"""The logical consumers of the shop's ``orders`` queue.

Each receives every order. Handlers are idempotent (delivery is at least once): they
only act on orders not yet handled.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from django.utils import timezone

from redisq_django import Message, Reject, consumer
from shop.demo_data import FRAUD_LIMIT
from shop.models import Order

logger = logging.getLogger("shop")


class SuspiciousOrder(Exception):
    """The fraud check cannot clear an order automatically."""


class LedgerMismatch(Exception):
    """A posting the ledger cannot book: a refund larger than its order's total."""


def _order(message: Message) -> Order:
    order = Order.objects.filter(pk=message.payload["order"]).first()
    if order is None:
        raise Reject(f"order {message.payload['order']} does not exist")
    return order


@consumer("orders", name="billing", atomic=True)
def billing(message: Message) -> None:
    """Charge the order: in one transaction with its inbox row (atomic=True), so that a
    message delivered again after a crash charges nothing twice."""
    Order.objects.filter(pk=_order(message).pk, billed_at=None).update(billed_at=timezone.now())


@consumer("orders", name="email", concurrency=2, rate="20/s", time_limit=30)
def email(message: Message) -> None:
    """Send the confirmation e-mail: at most 20 a second for the whole fleet (the mail
    provider's limit), and never stuck on a hung SMTP call for more than 30 s."""
    order = _order(message)
    if order.confirmed_at is None:
        logger.info("confirmation sent to %s for order %s", order.email, order.pk)
        Order.objects.filter(pk=order.pk).update(confirmed_at=timezone.now())


@consumer("orders", name="fraud-check", max_retries=2, backoff=0.2)
def fraud_check(message: Message) -> None:
    """Clear small orders; large ones raise, are retried, then become dead letters that
    staff review and retry from the admin."""
    order = _order(message)
    if order.total > FRAUD_LIMIT:
        raise SuspiciousOrder(f"order {order.pk} totals {order.total}, over {FRAUD_LIMIT}")
    Order.objects.filter(pk=order.pk, fraud_checked_at=None).update(fraud_checked_at=timezone.now())


@consumer("ledger", name="postings", ordered=True, max_retries=8, backoff=30, max_backoff=600)
def postings(message: Message) -> None:
    """Book a customer's charges and refunds in the order they were published: the
    message key is the customer's e-mail, so one customer's postings run one at a time,
    in order (the queue has 4 partitions: settings.py). A refund larger than its order
    raises; while it is retried (30 s, 60 s, ... up to 10 min apart) that customer's later
    postings wait behind it, which the admin shows as a held key, where staff can end it."""
    order = _order(message)
    kind, amount = message.payload["kind"], Decimal(message.payload["amount"])
    if kind == "refund" and amount > order.total:
        raise LedgerMismatch(
            f"refund {amount} for order {order.pk} exceeds its total {order.total}"
        )
    logger.info("%s of %s booked for %s (order %s)", kind, amount, message.key, order.pk)


@consumer("stock", name="restock", start="earliest")
def restock(message: Message) -> None:
    """Each tick of the "stock-check" schedule (shop/schedules.py)."""
    logger.info("stock check for %s (message %s)", message.headers["scheduled_for"], message.id)
