"""``manage.py redisq``: status, replay, dead letters, schedules, deliver now, held-back
ordering keys, partitions and purge from the shell.

Each sub-command's parser names what runs it (``set_defaults(handler=…)``, a
:data:`Handler`), here or beside its parser in ``management/console.py``,
``held.py`` and ``partitioning.py``; :meth:`Command.handle` runs the one parsed."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from redisq_django import deadletters, operations
from redisq_django.arguments import django_common_options, positive_int
from redisq_django.connection import get_broker
from redisq_django.core import bounds
from redisq_django.core.errors import RedisqError
from redisq_django.core.worker import StopSignal
from redisq_django.figures import age
from redisq_django.management import console, held, inbox_command, partitioning
from redisq_django.management.console import Write, table
from redisq_django.publishing.outbox import pending_count, relay_once
from redisq_django.schedules import listing

_HEAD = [
    "QUEUE",
    "CONSUMER",
    "BACKLOG",
    "IN FLIGHT",
    "DELAYED",
    "RETRYING",
    "DEAD (REDIS)",
    "OLDEST UNACKED",
    "ALIVE",
    "LENGTH",
    "DROPPED",
    "ARCHIVE LAG",
]


#: What each sub-command runs (``set_defaults(handler=…)`` on its parser): the parsed
#: options, and where its output goes (the command's ``stdout.write``).
Handler = Callable[[dict[str, Any], Write], None]


class Command(BaseCommand):
    help = (
        "Operate redisq queues: status, replay, dead letters, outbox relay, schedules, "
        "deliver now, held keys, archives, partitions, purge."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        common = [django_common_options()]  # --settings etc. after a sub-command too

        status = sub.add_parser(
            "status", parents=common, help="queues and consumers with live stats"
        )
        status.add_argument("queues", nargs="*", metavar="QUEUE", help="default: all")
        status.set_defaults(handler=self.status)

        replay = sub.add_parser(
            "replay", parents=common, help="move a consumer back (or forward) to receive again"
        )
        replay.add_argument("queue")
        replay.add_argument("consumer")
        replay.add_argument(
            "--from",
            dest="start",
            required=True,
            metavar="POINT",
            help="earliest, latest, an ISO 8601 time (UTC unless a zone is given) or a message id",
        )
        replay.set_defaults(handler=self.replay)

        dead = sub.add_parser("dead", parents=common, help="dead letters (database rows)")
        dead_sub = dead.add_subparsers(
            dest="dead_action", required=True, metavar="list|causes|retry|discard|sink"
        )
        dl = dead_sub.add_parser("list", parents=common, help="list dead letters")
        dl.add_argument("--queue")
        dl.add_argument("--consumer")
        dl.add_argument("--status", default="dead", choices=["dead", "retried", "discarded", "all"])
        dl.add_argument("--limit", type=positive_int, default=50)
        dl.set_defaults(handler=self.dead_list)
        causes = dead_sub.add_parser(
            "causes",
            parents=common,
            help="dead letters by cause: those of one consumer that failed with one error",
        )
        causes.set_defaults(handler=self.dead_causes)
        # The sub-command's name in 0.9, kept one minor version (the word is the Redis
        # consumer group's alone now): it works, and says so on stderr.
        old_name = dead_sub.add_parser(
            "groups",
            parents=common,
            help="deprecated: 'dead causes'",
            description="Deprecated name of 'redisq dead causes', removed in the next minor "
            "version.",
        )
        old_name.set_defaults(handler=self.dead_causes_by_old_name)
        for p in (causes, old_name):
            p.add_argument("--queue")
            p.add_argument("--consumer")
            p.add_argument("--limit", type=positive_int, default=50)
        for name, text, handler in (
            ("retry", "deliver again, each to its own consumer only", self.dead_retry),
            ("discard", "mark discarded (the record is kept; never delivered)", self.dead_discard),
        ):
            p = dead_sub.add_parser(name, parents=common, help=text)
            p.set_defaults(handler=handler)
            p.add_argument(
                "ids", nargs="*", type=positive_int, metavar="ID", help="ids from 'dead list'"
            )
            p.add_argument(
                "--all",
                action="store_true",
                help="every dead letter matching --queue/--consumer/--error-class/--error "
                "(in chunks, whatever their number)",
            )
            p.add_argument("--queue")
            p.add_argument("--consumer")
            p.add_argument("--error-class", help="e.g. ValueError")
            p.add_argument(
                "--error",
                dest="error_key",
                metavar="NORMALISED",
                help="the normalised error message, as 'dead causes' shows it",
            )
            console.add_user_option(p)
        dead_sub.add_parser(
            "sink", parents=common, help="move dead letters from Redis into the database now"
        ).set_defaults(handler=self.dead_sink)

        relay = sub.add_parser("relay", parents=common, help="forward outbox rows to Redis")
        relay.add_argument("--once", action="store_true", help="send what is waiting, then exit")
        relay.add_argument(
            "--interval",
            type=bounds.argument("relay_interval"),
            default=1.0,
            help="seconds between rounds (default 1)",
        )
        relay.add_argument(
            "--database",
            help="database whose outbox to relay (default: where the router puts "
            "OutboxMessage); run one relay per database that publishes with using=",
        )
        relay.set_defaults(handler=self.relay)

        sub.add_parser(
            "schedules",
            parents=common,
            help="periodic schedules: timing, target, state, last tick fired, next tick",
        ).set_defaults(handler=self.schedules)

        console.add_deliver_now(sub, common)

        console.add_end(sub, common)

        held.add_held(sub, common)

        console.add_archives(sub, common)

        partitioning.add_partitions(sub, common)

        inbox_command.add_inbox(sub, common)

        purge = sub.add_parser(
            "purge",
            parents=common,
            help="delete every message of a queue, or what waits for one consumer",
        )
        purge.add_argument("queue")
        purge.add_argument(
            "--consumer",
            help="only this logical consumer: skip its backlog, discard its retries and "
            "private input (messages in flight finish; other consumers keep theirs)",
        )
        purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        purge.add_argument(
            "--force",
            action="store_true",
            help="purge a queue even while a registered archive has not stored all of its "
            "messages (without it, purge refuses): they are lost to the archive, whose next "
            "run stops on the gap (failOnDataLoss) or reports it",
        )
        console.add_user_option(purge)
        purge.set_defaults(handler=self.purge)

    def handle(self, *args: Any, **opts: Any) -> None:
        handler: Handler = opts["handler"]  # the sub-command's (set_defaults)
        try:
            handler(opts, self.stdout.write)
        except (RedisqError, ValueError) as exc:
            raise CommandError(str(exc)) from None

    def status(self, opts: dict[str, Any], write: Write) -> None:
        stats = operations.queue_stats(opts["queues"] or None)
        if not stats:
            write("No queues yet.")
            return
        rows = [list(_HEAD)]
        for q in stats:
            rows.append(
                [
                    q.name,
                    "(all)",
                    str(q.total("backlog")),
                    str(q.total("in_flight")),
                    str(q.delayed),
                    str(q.total("waiting_retry")),
                    str(q.total("dead")),
                    age(q.oldest_unacked_age_s),
                    str(q.total("instances_alive")),
                    str(q.length),
                    str(q.dropped),
                    "-" if q.archive_lag is None else str(q.archive_lag),
                ]
            )
            for c in q.consumers:
                rows.append(
                    [
                        "",
                        c.name + (" (stalled)" if c.stalled else ""),
                        str(c.backlog),
                        str(c.in_flight),
                        "",
                        str(c.waiting_retry),
                        str(c.dead),
                        age(c.oldest_unacked_age_s),
                        str(c.instances_alive),
                        "",
                        "",
                        "",
                    ]
                )
        write(table(rows))
        write(
            "BACKLOG: waiting to be delivered; a queue line adds up its consumers. LENGTH "
            "includes acknowledged messages kept for replay. (stalled): a backlog and no "
            "instance alive."
        )

    def replay(self, opts: dict[str, Any], write: Write) -> None:
        start = operations.parse_start(opts["start"])
        get_broker().consumers.reset(opts["queue"], opts["consumer"], start)
        write(f"{opts['queue']}/{opts['consumer']} now reads from {opts['start']}.")

    def dead_sink(self, opts: dict[str, Any], write: Write) -> None:
        write(f"Moved {deadletters.sink_all()} dead letter(s) from Redis to the database.")

    def dead_list(self, opts: dict[str, Any], write: Write) -> None:
        status = None if opts["status"] == "all" else opts["status"]
        rows = deadletters.rows(opts["queue"], opts["consumer"], status)
        letters = list(rows[: opts["limit"]])
        if not letters:
            write("No dead letters.")
            return
        table_rows = [
            ["ID", "QUEUE", "CONSUMER", "MESSAGE", "ATTEMPTS", "STATUS", "ERROR", "LAST FAILURE"]
        ]
        for d in letters:
            error = f"{d.error_class}: {d.error_message}"[:60]
            last = d.last_failed_at.isoformat(timespec="seconds") if d.last_failed_at else "-"
            table_rows.append(
                [
                    str(d.pk),
                    d.queue,
                    d.consumer,
                    d.message_id,
                    str(d.attempts),
                    d.status,
                    error,
                    last,
                ]
            )
        write(table(table_rows))

    def dead_causes_by_old_name(self, opts: dict[str, Any], write: Write) -> None:
        self.stderr.write(
            "'redisq dead groups' is deprecated and will be removed in the next minor "
            "version: use 'redisq dead causes'.",
            self.style.WARNING,
        )
        self.dead_causes(opts, write)

    def dead_causes(self, opts: dict[str, Any], write: Write) -> None:
        rows = deadletters.rows(opts["queue"], opts["consumer"])
        found, total = deadletters.causes(rows, opts["limit"])
        if not found:
            write("No dead letters.")
            return
        lines = [["COUNT", "QUEUE", "CONSUMER", "ERROR CLASS", "ERROR (NORMALISED)", "LAST"]]
        for c in found:
            last = c.last_seen.isoformat(timespec="seconds") if c.last_seen else "-"
            lines.append([str(c.count), c.queue, c.consumer, c.error_class, c.error_key[:60], last])
        write(table(lines))
        if total > len(found):
            write(f"({total - len(found)} smaller cause(s) not shown; see --limit.)")
        write(
            "Retry one: redisq dead retry --all --queue Q --consumer C --error-class E "
            "--error 'NORMALISED'"
        )

    def dead_retry(self, opts: dict[str, Any], write: Write) -> None:
        user, rows = _matching(opts)
        result = deadletters.retry_matching(rows, user)
        write(f"Re-drove {result.done} dead letter(s), each to its own consumer.")
        if result.skipped:
            write(
                f"{result.skipped} undecodable dead letter(s) cannot be re-driven: publish "
                "corrected messages and discard these."
            )
        if result.error:
            raise CommandError(f"{result.error} {result.remaining} are still dead.")

    def dead_discard(self, opts: dict[str, Any], write: Write) -> None:
        user, rows = _matching(opts)
        result = deadletters.discard_matching(rows, user)
        write(f"Discarded {result.done} dead letter(s).")
        if result.error:
            raise CommandError(f"{result.error} {result.remaining} are still dead.")

    def relay(self, opts: dict[str, Any], write: Write) -> None:
        using = opts["database"]
        if opts["once"]:
            sent = relay_once(using=using)
            write(f"Sent {sent} outbox message(s); {pending_count(using)} waiting.")
            return
        stop = StopSignal()  # safe in a signal handler, unlike an Event
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.request())
        write("Relaying outbox messages; Ctrl-C to stop.")
        while not stop.is_set():
            close_old_connections()
            try:
                sent = relay_once(using=using)
                if sent:
                    write(f"Sent {sent} outbox message(s).")
            except Exception as exc:  # database or Redis away: try again next round
                self.stderr.write(f"Relay round failed: {exc}")
            stop.wait(opts["interval"])

    def schedules(self, opts: dict[str, Any], write: Write) -> None:
        states, problem = listing.current(get_broker().schedule_ledger)
        if not states:
            write("No schedules (declare them with periodic(), or add them in the admin).")
        rows = [["NAME", "WHEN", "TIME ZONE", "TARGET", "STATE", "LAST TICK FIRED", "NEXT TICK"]]
        for s in states:
            last = "?" if problem else listing.when(s.last_sent_ms)
            if not problem and (s.last_claimed_ms or 0) > (s.last_sent_ms or 0):
                last += f" (claimed {listing.when(s.last_claimed_ms)}, not sent yet)"
            state = f"{s.state}: {s.error}" if s.error else s.state
            rows.append(
                [
                    s.name,
                    s.expression,
                    s.timezone,
                    s.target,
                    state,
                    last,
                    listing.when(s.next_tick_ms),
                ]
            )
        if states:
            write(table(rows))
            write(
                "Times in UTC. NEXT TICK: the next one due, computed now from the current time "
                "(Redis's clock, as the workers use)."
            )
        if problem:
            self.stderr.write(f"{problem} Last ticks unknown (?); next ticks by this host's clock.")

    def purge(self, opts: dict[str, Any], write: Write) -> None:
        if opts["consumer"] is not None:
            console.purge_consumer(opts, write)
            return
        console.purge_queue(opts, write, self.stderr.write)


def _matching(opts: dict[str, Any]) -> tuple[Any, Any]:
    """``dead retry`` / ``dead discard``: the ``--user`` named, and the dead letters
    meant (those matching the filters; with IDs, only those among them).

    Raises:
        CommandError: no such user, or neither IDs nor ``--all``.
    """
    user = console.user_named(opts["user"])
    rows = deadletters.rows(
        opts["queue"],
        opts["consumer"],
        error_class=opts["error_class"],
        error_key=opts["error_key"],
    )
    if not opts["all"]:
        if not opts["ids"]:
            raise CommandError("Name the dead letters (IDs from 'redisq dead list') or pass --all.")
        rows = rows.filter(pk__in=opts["ids"])
    return user, rows
