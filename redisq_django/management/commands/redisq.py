"""``manage.py redisq``: status, replay, dead letters and purge from the shell."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from redisq_django import operations
from redisq_django.core.errors import RedisqError
from redisq_django.management.commands.runconsumer import positive_int


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


class Command(BaseCommand):
    help = "Operate redisq queues: status, replay, dead letters, purge."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        status = sub.add_parser("status", help="queues and consumers with live stats")
        status.add_argument("queues", nargs="*", metavar="QUEUE", help="default: all")

        replay = sub.add_parser("replay", help="move a consumer back (or forward) to receive again")
        replay.add_argument("queue")
        replay.add_argument("consumer")
        replay.add_argument(
            "--from",
            dest="start",
            required=True,
            metavar="POINT",
            help="earliest, latest, an ISO 8601 time (UTC unless a zone is given) or a message id",
        )

        dead = sub.add_parser("dead", help="dead letters still in Redis")
        dead_sub = dead.add_subparsers(
            dest="dead_action", required=True, metavar="list|retry|discard"
        )
        dl = dead_sub.add_parser("list", help="list dead letters")
        dl.add_argument("queue")
        dl.add_argument("consumer", nargs="?")
        dl.add_argument("--limit", type=positive_int, default=50)
        for name, text in (("retry", "deliver again to that consumer only"), ("discard", "delete")):
            p = dead_sub.add_parser(name, help=text)
            p.add_argument("queue")
            p.add_argument("consumer")
            p.add_argument(
                "ids", nargs="*", metavar="ID", help="dead-letter ids (from 'dead list')"
            )
            p.add_argument("--all", action="store_true", help="every dead letter of the consumer")

        purge = sub.add_parser("purge", help="delete every message of a queue")
        purge.add_argument("queue")
        purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, f"do_{opts['action']}")(opts)
        except (RedisqError, ValueError) as exc:
            raise CommandError(str(exc)) from None

    def do_status(self, opts: dict[str, Any]) -> None:
        stats = operations.queue_stats(opts["queues"] or None)
        if not stats:
            self.stdout.write("No queues yet.")
            return
        rows = [
            [
                "QUEUE",
                "CONSUMER",
                "LENGTH",
                "LAG",
                "IN FLIGHT",
                "DELAYED",
                "RETRYING",
                "DEAD",
                "OLDEST UNACKED",
                "ALIVE",
                "DROPPED",
            ]
        ]
        for q in stats:
            rows.append(
                [
                    q.name,
                    "",
                    str(q.length),
                    str(q.lag),
                    "",
                    str(q.delayed),
                    "",
                    "",
                    "",
                    "",
                    str(q.dropped),
                ]
            )
            for c in q.consumers:
                rows.append(
                    [
                        "",
                        c.name,
                        "",
                        str(c.lag),
                        str(c.in_flight),
                        "",
                        str(c.waiting_retry),
                        str(c.dead),
                        _age(c.oldest_unacked_age_s),
                        str(c.instances_alive),
                        "",
                    ]
                )
        self.stdout.write(table(rows))

    def do_replay(self, opts: dict[str, Any]) -> None:
        operations.replay(opts["queue"], opts["consumer"], opts["start"])
        self.stdout.write(f"{opts['queue']}/{opts['consumer']} now reads from {opts['start']}.")

    def do_dead(self, opts: dict[str, Any]) -> None:
        queue, consumer = opts["queue"], opts["consumer"]
        if opts["dead_action"] == "list":
            letters = operations.dead_letters(queue, consumer, opts["limit"])
            if not letters:
                self.stdout.write("No dead letters.")
                return
            rows = [["ID", "CONSUMER", "MESSAGE", "ATTEMPTS", "REASON", "ERROR", "LAST FAILURE"]]
            for d in letters:
                error = f"{d.error_class}: {d.error_message}"[:60]
                last = d.last_failed_at.isoformat(timespec="seconds") if d.last_failed_at else "-"
                rows.append([d.entry_id, d.group, d.id, str(d.attempts), d.reason, error, last])
            self.stdout.write(table(rows))
            return
        ids = list(opts["ids"])
        if opts["all"]:
            ids = [d.entry_id for d in operations.dead_letters(queue, consumer, limit=10**6)]
        if not ids:
            raise CommandError("Name the dead letters (IDs from 'redisq dead list') or pass --all.")
        if opts["dead_action"] == "retry":
            done = operations.retry_dead(queue, consumer, ids)
            self.stdout.write(
                f"Re-drove {len(done)} of {len(ids)} dead letter(s) to {queue}/{consumer}."
            )
        else:
            n = operations.discard_dead(queue, consumer, ids)
            self.stdout.write(f"Discarded {n} of {len(ids)} dead letter(s).")

    def do_purge(self, opts: dict[str, Any]) -> None:
        queue = opts["queue"]
        if not opts["yes"]:
            answer = input(
                f"Delete every message of queue {queue!r}? Type the queue name to confirm: "
            )
            if answer.strip() != queue:
                raise CommandError("Not confirmed; nothing was deleted.")
        operations.purge(queue)
        self.stdout.write(f"Purged {queue}.")
