"""``manage.py runconsumer QUEUE [QUEUE ...]``: run the consumers of queues."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from redisq_django.conf import get_core_config, get_settings
from redisq_django.connection import get_broker
from redisq_django.consuming.runner import build_worker
from redisq_django.core.errors import RedisqError, describe_client
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.management.arguments import (
    configure_logging,
    non_negative_float,
    positive_int,
)
from redisq_django.models import TUNABLES, Consumer

logger = logging.getLogger("redisq.worker")


class Command(BaseCommand):
    help = (
        "Run the consumers declared (@consumer) for the given queues until stopped. "
        "SIGTERM/SIGINT: finish in-flight messages, then exit; a second signal exits now."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="queues to consume")
        parser.add_argument(
            "--consumer",
            action="append",
            default=[],
            metavar="NAME",
            help="run only this logical consumer (repeatable)",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            help="handler threads per consumer (wins over code and admin)",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="handle what is there (incl. retries), then exit 0",
        )
        parser.add_argument(
            "--max-messages", type=positive_int, help="exit after handling this many messages"
        )
        parser.add_argument(
            "--prefetch",
            type=positive_int,
            default=WorkerOptions.prefetch,
            help="most messages fetched per round trip by each thread; batches adapt "
            f"between 1 and this to the handlers' speed (default {WorkerOptions.prefetch})",
        )
        parser.add_argument(
            "--grace-period",
            type=non_negative_float,
            help="seconds in-flight handlers get after SIGTERM "
            "(default REDISQ['SHUTDOWN_GRACE_PERIOD'])",
        )
        parser.add_argument(
            "--stats-interval",
            type=non_negative_float,
            default=30.0,
            help="seconds between summary lines (0: none; default 30)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        configure_logging(opts["verbosity"])
        try:
            get_broker().client.ping()
        except Exception as exc:  # RedisUnavailable or a redis-py connection error
            raise CommandError(
                f"Cannot reach Redis at {describe_client(get_broker().client)}: {exc}"
            ) from None
        grace = opts["grace_period"]
        options = WorkerOptions(
            prefetch=opts["prefetch"],
            burst=opts["burst"],
            max_messages=opts["max_messages"],
            grace_period=get_settings()["SHUTDOWN_GRACE_PERIOD"] if grace is None else grace,
            stats_interval=opts["stats_interval"],
        )
        try:
            worker = build_worker(
                opts["queues"], opts["consumer"], concurrency=opts["concurrency"], options=options
            )
        except RedisqError as exc:
            raise CommandError(str(exc)) from None
        self._banner(worker, opts)
        self._install_signals(worker)
        try:
            code = worker.run()
        except RedisqError as exc:
            raise CommandError(str(exc)) from None
        if worker.cold:
            sys.stderr.flush()
            os._exit(code)  # handler threads may still run: leave without waiting
        if code:
            sys.exit(code)

    def _banner(self, worker: Worker, opts: dict[str, Any]) -> None:
        config = get_core_config()
        broker = worker.broker
        mode = "burst" if opts["burst"] else "continuous"
        if opts["max_messages"]:
            mode += f", at most {opts['max_messages']} messages"
        lines = [
            f"redisq worker {socket.gethostname()}:{os.getpid()} ({mode}), Redis "
            f"{describe_client(broker.client)}, prefix {config.prefix!r}",
        ]
        rows = {
            (r.queue.name, r.name): r
            for r in Consumer.objects.select_related("queue").filter(queue__name__in=opts["queues"])
        }
        for spec in worker.specs.values():
            row = rows[spec.key]
            state = "paused" if spec.paused else ("disabled" if not spec.enabled else "running")
            lines.append(f"  {spec.queue}/{spec.name} [{state}] -> {row.handler}")
            parts = []
            for field in TUNABLES:
                eff = row.effective(field, config)
                value, source = eff.value, eff.source
                if field == "concurrency" and opts["concurrency"]:
                    value, source = opts["concurrency"], "--concurrency"
                parts.append(f"{field}={value} ({source})")
            lines.append("      " + ", ".join(parts) + f", start={row.start}")
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    def _install_signals(self, worker: Worker) -> None:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if worker.stopping:
                logger.warning(
                    "%s again: exiting now; in-flight messages will be redelivered", name
                )
                worker.stop(cold=True)
            else:
                logger.warning(
                    "%s: finishing in-flight messages (grace period %.0f s); "
                    "send it again to exit now",
                    name,
                    worker.options.grace_period,
                )
                worker.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
