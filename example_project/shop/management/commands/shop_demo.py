"""``manage.py shop_demo setup|report``: the steps of ``make demo``."""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction

from redisq_django import publish
from redisq_django.deadletters.sinking import sink_all
from redisq_django.models import DeadLetter
from shop.demo_data import TOTALS, order_payload, posting
from shop.models import Order


class Command(BaseCommand):
    help = (
        "Create the demo's staff user and orders (setup), print what happened (report), "
        "read it back from the Parquet archive with Spark (history), or show what the "
        "periodic schedule published (schedule)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "step", choices=["setup", "report", "history", "schedule", "incident", "traffic"]
        )
        parser.add_argument(
            "--seconds",
            type=float,
            default=600.0,
            help="traffic: stop after this long at the latest (default 600; SIGTERM stops it)",
        )
        parser.add_argument(
            "--every", type=float, default=3.0, help="traffic: seconds between two orders"
        )

    def handle(self, *args: Any, step: str, **options: Any) -> None:
        if step == "traffic":
            self.traffic(options["seconds"], options["every"])
        else:
            getattr(self, step)()

    def incident(self) -> None:
        """What the console should have to show after the demo, beyond the fraud check's
        dead letters: orders deleted before their messages were handled (each consumer
        rejects them: another error), a malformed message (no order key: it fails, is
        retried, then dies: a third error), and two reminders due in an hour (delayed)."""
        gone = [order_payload(90_000 + n, "10.00") for n in (1, 2)]
        for payload in gone:
            publish("orders", payload)
        publish("orders", {"event": "created", "total": "12.00"})  # no "order": malformed
        first = Order.objects.order_by("pk").first()
        for hours in (1, 2):
            assert first is not None  # setup ran first
            publish(
                "orders",
                order_payload(first.pk, first.total, event="reminder"),
                delay=timedelta(hours=hours),
            )
        # The ledger (4 partitions, one customer's postings in order): a charge for each
        # order, then a refund ten times its order's total (a typo) that fails and is
        # retried, holding back the two postings of that customer published after it.
        orders = list(Order.objects.order_by("pk"))
        for order in orders:
            publish("ledger", posting(order.pk, order.total), key=order.email)
        typo = orders[-1]
        publish("ledger", posting(typo.pk, typo.total * 10, "refund"), key=typo.email)
        publish("ledger", posting(typo.pk, "5.00", "refund"), key=typo.email)
        publish("ledger", posting(typo.pk, "5.00"), key=typo.email)
        self.stdout.write(
            "published 2 messages for orders that no longer exist, 1 malformed message "
            "and 2 reminders delayed by 1 and 2 hours; to 'ledger' (4 partitions) a charge "
            f"per order and, for {typo.email}, a refund of {typo.total * 10} (ten times the "
            "order: it fails and is retried) with two postings behind it"
        )

    def traffic(self, seconds: float, every: float) -> None:
        """An order every ``every`` seconds (totals as in setup, so some fail the fraud
        check), each with its charge to the ledger, for at most ``seconds``: the trends of the
        console span minutes."""
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            total = TOTALS[n % len(TOTALS)]
            n += 1
            with transaction.atomic():
                order = Order.objects.create(email=f"walk-in{n}@example.com", total=Decimal(total))
            publish("ledger", posting(order.pk, order.total), key=order.email)
            self.stdout.write(f"order {n}: {total}")
            self.stdout.flush()
            time.sleep(every)

    def setup(self) -> None:
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", "admin@example.com", "admin")
        for n, total in enumerate(TOTALS, start=1):
            with transaction.atomic():
                Order.objects.create(email=f"customer{n}@example.com", total=Decimal(total))
        # A rolled-back order is never published.
        try:
            with transaction.atomic():
                Order.objects.create(email="rolled-back@example.com", total=Decimal("1.00"))
                raise RuntimeError("payment page closed")
        except RuntimeError:
            pass
        self.stdout.write(
            f"created {len(TOTALS)} orders (each published to 'orders' after its commit) "
            "and rolled one back (nothing published)"
        )

    def report(self) -> None:
        sink_all()
        total = Order.objects.count()
        self.stdout.write(f"orders: {total}")
        for label, field in (
            ("billing", "billed_at"),
            ("email", "confirmed_at"),
            ("fraud-check", "fraud_checked_at"),
        ):
            done = Order.objects.exclude(**{field: None}).count()
            self.stdout.write(f"  {label:<12} handled {done} of {total}")
        dead = DeadLetter.objects.filter(status=DeadLetter.Status.DEAD).order_by("id")
        self.stdout.write(f"dead letters: {dead.count()}")
        for d in dead:
            self.stdout.write(
                f"  #{d.pk} {d.queue}/{d.consumer} message {d.message_id} after "
                f"{d.attempts} attempts: {d.error_class}: {d.error_message}"
            )

    def schedule(self) -> None:
        """The ticks of "stock-check" that the workers published: each exactly once."""
        from collections import Counter

        from redisq_django.connection import get_broker
        from redisq_django.models import Schedule

        broker = get_broker()
        entries = broker.client.xrange(broker.keys("stock").log)
        ids = [fields[b"id"].decode() for _, fields in entries]
        twice = [i for i, n in Counter(ids).items() if n > 1]
        row = Schedule.objects.get(name="stock-check")
        self.stdout.write(
            f"schedule {row.name} ({row.timing().describe()} -> queue {row.queue}): "
            f"{len(ids)} ticks published, {len(twice)} twice; last run {row.last_run_at:%H:%M:%S}"
        )
        for message_id in ids:
            self.stdout.write(f"  {message_id}")

    def history(self) -> None:
        """What each consumer did, aggregated by Spark from the archive (the events)."""
        from pyspark.sql import functions as F

        from redisq_django.conf import get_settings
        from redisq_django.pipeline.session import build_session

        root = get_settings()["ARCHIVE_ROOT"]
        spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "2"})
        try:
            messages = spark.read.parquet(f"{root}/messages")
            events = spark.read.parquet(f"{root}/events")
            self.stdout.write(f"messages archived: {messages.count()}")
            rows = (
                events.groupBy("consumer", "event")
                .agg(F.count("*").alias("n"), F.max("attempt").alias("max_attempt"))
                .orderBy("consumer", "event")
                .collect()  # a handful of summary rows
            )
            for row in rows:
                self.stdout.write(
                    f"  {row['consumer']:<12} {row['event']:<8} {row['n']:>3} "
                    f"(highest attempt {row['max_attempt']})"
                )
        finally:
            spark.stop()
