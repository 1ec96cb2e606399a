"""The demo's orders as plain data, without Django: what ``make demo`` creates
(``manage.py shop_demo setup``), and what the README's tests archive and replay
(``tests/pipeline/test_readme_spark.py``), so that both run the same commands on data of
the same shape."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

#: The totals of the demo's orders, one order each, in this order.
TOTALS = ["19.90", "250.00", "1499.00", "42.00", "2300.00", "75.50"]
#: Orders above this total are held by the fraud check (it raises; see consumers.py).
FRAUD_LIMIT = Decimal("1000.00")
#: The logical consumers of the "orders" queue (consumers.py).
CONSUMERS = ("billing", "email", "fraud-check")
#: Attempts of the fraud check before an order over the limit is a dead letter
#: (``max_retries=2`` in consumers.py).
FRAUD_ATTEMPTS = 3


def order_payload(order_id: int, total: Decimal | str, event: str = "created") -> dict[str, Any]:
    """What consumers receive for an order: its key and total (not the customer's data).
    The total is a Decimal, which the message's JSON carries as a string ("1499.00")."""
    return {"order": order_id, "total": Decimal(total), "event": event}


def posting(order_id: int, amount: Decimal | str, kind: str = "charge") -> dict[str, Any]:
    """A ledger posting of an order (queue "ledger", keyed by the customer's e-mail)."""
    return {"order": order_id, "amount": Decimal(amount), "kind": kind}
