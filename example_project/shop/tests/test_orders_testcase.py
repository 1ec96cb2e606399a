"""The same with Django's ``TestCase`` and ``RedisqTestMixin`` (docs/howto/testing.md
shows this file)."""

from decimal import Decimal

from django.test import TestCase

from redisq_django.testing import RedisqTestMixin, capture, drain
from shop.models import Order


class OrderTests(RedisqTestMixin, TestCase):
    def test_a_new_order_is_billed_and_confirmed(self):
        # The test's transaction never commits: capture() runs its on-commit callbacks.
        with capture() as published:
            order = Order.objects.create(email="ada@example.com", total=Decimal("12.50"))
        self.assertEqual([m.queue for m in published], ["orders"])

        result = drain("orders")

        order.refresh_from_db()
        self.assertIsNotNone(order.billed_at)
        self.assertIsNotNone(order.confirmed_at)
        self.assertEqual(result.total.handled, 3)  # billing, email and fraud-check
        self.assertEqual(self.redisq.dead_letters("orders"), [])
