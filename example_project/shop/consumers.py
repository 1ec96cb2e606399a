"""The logical consumers of the shop's ``orders`` queue."""

from __future__ import annotations

import logging

from redisq_django import Message, consumer

logger = logging.getLogger("shop")


@consumer("orders", name="billing", max_retries=3, backoff=0.2)
def billing(message: Message) -> None:
    """Charge the order (succeeds)."""
    logger.info("billing order %s", message.payload.get("order"))


@consumer("orders", name="email", concurrency=2)
def email(message: Message) -> None:
    """Send the order confirmation (succeeds)."""
    logger.info("emailing confirmation for order %s", message.payload.get("order"))
