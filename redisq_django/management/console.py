"""What the live pages do, from the shell: ``manage.py redisq deliver-now``, ``manage.py
redisq end QUEUE CONSUMER ID``, ``manage.py redisq purge QUEUE [--consumer C]`` and
``manage.py redisq archives [remove NAME]`` (through
the same functions as the admin, written to the same admin history with ``--user``), and
the name and user checks ``manage.py redisq`` shares."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from redisq_django import admin_log, operations
from redisq_django import archives as named
from redisq_django.connection import get_broker
from redisq_django.core.archives import LAG_COUNT_CAP
from redisq_django.core.keys import validate_name
from redisq_django.core.operator import ENDABLE, MAX_PAGE

#: How a sub-command's handler writes (``BaseCommand.stdout.write``).
Write = Callable[[str], Any]


def add_user_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user",
        help="record the change in the admin history as this user (username; needs "
        "django.contrib.admin)",
    )


def add_deliver_now(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``deliver-now`` sub-command's arguments."""
    p = sub.add_parser(
        "deliver-now",
        parents=common,
        help="deliver delayed messages (of a queue) or retries (of a consumer) now",
        description="Without --consumer: the queue's delayed messages, appended to its log "
        "now (every consumer receives them, after what already waits). With --consumer: its "
        "retries, to its private input (its next fetch reads them). As 'Deliver now' on "
        "the live pages.",
    )
    p.add_argument("queue")
    p.add_argument("ids", nargs="*", metavar="ID", help="message ids (--list shows them)")
    p.add_argument("--consumer", help="a logical consumer: deliver its retries")
    p.add_argument("--all", action="store_true", help="every one waiting, whatever their number")
    p.add_argument("--list", action="store_true", help="show what waits (ids); change nothing")
    add_user_option(p)
    p.set_defaults(handler=deliver_now)


def add_end(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``end`` sub-command's arguments."""
    p = sub.add_parser(
        "end",
        parents=common,
        help="end poison messages of a consumer before their time: dead letters (reason "
        "ended), or deleted",
        description="Each ID (a message id, or a message's reference as the live pages "
        "show it) is looked for among the consumer's retries, its private input and the "
        "log after its position. A retry or a private-input entry becomes its dead letter "
        "now (a key it holds passes on, in order); a message waiting in the log, which "
        "every consumer shares, is marked: the consumer's workers make it a dead letter "
        "when they read it, instead of running it, and the queue's other consumers still "
        "receive it. As End and Delete on the live pages.",
    )
    p.add_argument("queue")
    p.add_argument("consumer")
    p.add_argument("ids", nargs="+", metavar="ID", help="message ids (or references)")
    p.add_argument(
        "--delete", action="store_true", help="delete them instead: no dead letter, for good"
    )
    p.add_argument("--yes", action="store_true", help="with --delete: do not ask")
    add_user_option(p)
    p.set_defaults(handler=end)


def end(opts: dict[str, Any], write: Write) -> None:
    """``redisq end QUEUE CONSUMER ID… [--delete]``: see :func:`add_end`."""
    queue, consumer, delete = opts["queue"], opts["consumer"], opts["delete"]
    user = user_named(opts["user"])
    check_names(queue, consumer)
    operator = get_broker().operator
    refs = {i: i for i in opts["ids"] if i.partition(":")[0] in ENDABLE}
    names = [i for i in opts["ids"] if i not in refs]
    refs.update(operator.endable_refs(queue, consumer, names) if names else {})
    missing = [i for i in opts["ids"] if i not in refs]
    if delete and refs and not opts["yes"]:
        answer = input(
            f"Delete {len(refs)} message(s) of {queue}/{consumer} for good, without a dead "
            "letter? Type the consumer name to confirm: "
        )
        if answer.strip() != consumer:
            raise CommandError("Not confirmed; nothing was deleted.")
    by = getattr(user, "get_username", lambda: "")() or "manage.py redisq end"
    results = [
        operator.end_message(queue, consumer, ref, by=by, delete=delete) for ref in refs.values()
    ]
    ended = [r.entry.message_id for r in results if r.outcome == "ended" and r.entry]
    marked = [r.entry.message_id for r in results if r.outcome == "marked" and r.entry]
    late = [r.entry.message_id for r in results if r.outcome in ("in_flight", "read") and r.entry]
    gone = [ref for ref, r in zip(refs, results, strict=True) if r.outcome == "gone"]
    if ended:
        what = "Deleted" if delete else "Ended (dead letters now)"
        write(f"{what}: {len(ended)} message(s) of {queue}/{consumer}: {', '.join(ended)}.")
    if marked:
        fate = "deletes them" if delete else "makes them dead letters (reason ended)"
        write(
            f"Marked {len(marked)} message(s) waiting in the log for {queue}/{consumer}: "
            f"{', '.join(marked)}. Its workers {fate} when they read them, without running "
            "them; the queue's other consumers still receive them."
        )
    texts = [operations.ended_log(ended, delete=delete)] if ended else []
    if marked:
        texts.append(operations.marked_log(marked, [consumer], delete=delete))
    _record(user, queue, consumer, texts, write)
    problems = []
    if late:
        problems.append(
            f"read by {queue}/{consumer} meanwhile (in flight or handled), not ended: "
            f"{', '.join(late)}; end their retry if they fail"
        )
    if missing or gone:
        problems.append(
            f"not waiting for {queue}/{consumer} (no such id, in flight, or handled meanwhile): "
            f"{', '.join(missing + gone)}"
        )
    if problems:
        raise CommandError("; ".join(problems).capitalize() + ".")


def table(rows: list[list[str]]) -> str:
    """``rows`` (the first: the headings) as aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def user_named(username: str | None) -> Any:
    """The user ``--user`` names (None without one).

    Raises:
        CommandError: no such user, or no admin history to record the change in (asked
            before anything is changed, rather than changing it unrecorded).
    """
    if not username:
        return None
    if not admin_log.is_kept():
        raise CommandError(
            "--user records the change in the admin history, which needs "
            "django.contrib.admin in INSTALLED_APPS (this project has no admin): leave out "
            "--user. Nothing was changed."
        )
    from django.contrib.auth import get_user_model

    try:
        return get_user_model()._default_manager.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"No user {username!r} (--user records the history).") from None


def check_names(queue: str, consumer: str | None = None) -> None:
    """Raise a CommandError naming what exists when ``queue`` (or its ``consumer``) is
    unknown to Redis."""
    validate_name("queue", queue)
    broker = get_broker()
    if queue not in broker.queues():
        raise CommandError(
            f"Queue {queue!r} is unknown to Redis (nothing was published to or consumed "
            "from it). Check the name: 'manage.py redisq status' lists the queues."
        )
    if consumer is None:
        return
    validate_name("consumer", consumer)
    known = broker.consumers.names(queue)
    if consumer not in known:
        raise CommandError(
            f"Logical consumer {consumer!r} is not registered on queue {queue!r} (its "
            f"consumers: {', '.join(known) or 'none'}). Check the name, or start a worker "
            "that declares it."
        )


def _record(user: Any, queue: str, consumer: str | None, texts: list[str], write: Write) -> None:
    if user is None or not texts:
        return
    for text in texts:
        if not operations.record_change(user, queue, consumer, text):
            write(f"Not recorded in the admin history: there is no database row for {queue}.")
            return


def deliver_now(opts: dict[str, Any], write: Write) -> None:
    """``redisq deliver-now``: see :func:`add_deliver_now`."""
    queue, consumer = opts["queue"], opts["consumer"]
    user = user_named(opts["user"])
    check_names(queue, consumer)
    what, where = ("retry", "retries") if consumer else ("delayed message", "delayed messages")
    label = f"{queue}/{consumer}" if consumer else queue
    if opts["list"]:
        _list(queue, consumer, write, f"No {where} wait for {label}.")
        return
    if not opts["all"] and not opts["ids"]:
        raise CommandError(
            f"Name the {where} (IDs: 'redisq deliver-now {queue}"
            f"{' --consumer ' + consumer if consumer else ''} --list' shows them) or pass --all."
        )
    if opts["all"] and opts["ids"]:
        raise CommandError("Pass either IDs or --all, not both.")
    ids = None if opts["all"] else opts["ids"]
    done = get_broker().operator.deliver_waiting(queue, consumer, ids)
    write(f"Delivered {done.count} {where if done.count != 1 else what} of {label} now.")
    if ids is None:
        texts = [f"Delivered now: {done.count} {where} (all that waited)"] if done.count else []
    else:
        kind = "retry" if consumer else "delayed"
        texts = [operations.delivered_log(kind, i) for i in done.ids]
    _record(user, queue, consumer, texts, write)
    problems = []
    if done.refused:
        shown = ", ".join(done.refused[:10]) + (" …" if len(done.refused) > 10 else "")
        problems.append(
            f"Not delivered, {len(done.refused)} entr{'y' if len(done.refused) == 1 else 'ies'} "
            f"another Redis client wrote that are no messages of ours: {shown}. Delivered, "
            "they would only become dead letters no handler can read: end or delete them "
            "(the live pages' End / Delete…)."
        )
    if done.missing:
        elsewhere = (
            f" A delayed message is the queue's: 'redisq deliver-now {queue} ID'."
            if consumer
            else f" A retry is its consumer's: 'redisq deliver-now {queue} ID --consumer C'."
        )
        problems.append(
            f"Not waiting among the {where} of {label} (no such id, or delivered "
            f"meanwhile): {', '.join(done.missing)}.{elsewhere}"
        )
    if problems:
        raise CommandError(" ".join(problems))


def _list(queue: str, consumer: str | None, write: Write, empty: str) -> None:
    operator = get_broker().operator
    if consumer is None:
        page = operator.delayed(queue, None, MAX_PAGE)
    else:
        page = operator.retrying(queue, consumer, None, MAX_PAGE)
    if not page.entries:
        write(empty)
        return
    rows = [["ID", "KEY", "DUE", "ATTEMPTS", "LAST ERROR", "PAYLOAD"]]
    for e in page.entries:
        due = "-" if e.due_ms is None else _iso(e.due_ms)
        key = (e.ordering_key or "-")[:40]
        rows.append([e.message_id, key, due, str(e.attempts), e.last_error[:40], e.preview[:40]])
    write(table(rows))
    if page.next:
        write(f"(the first {len(page.entries)} shown, soonest due first)")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def purge_queue(opts: dict[str, Any], write: Write, warn: Write) -> None:
    """``redisq purge QUEUE``: delete every message of the queue, after its name is typed;
    refused while a registered archive has not stored them all, unless ``--force``."""
    queue = opts["queue"]
    user = user_named(opts["user"])
    costs = operations.purge_costs(queue)
    if costs and not opts["force"]:
        raise CommandError(
            f"Nothing was deleted: {'; '.join(costs)}. Let the archive job store them "
            "first (python -m redisq_django.pipeline archive), or purge anyway with "
            "--force."
        )
    for cost in costs:
        warn(f"Warning: {cost} (--force).")
    if not opts["yes"]:
        answer = input(f"Delete every message of queue {queue!r}? Type the queue name to confirm: ")
        if answer.strip() != queue:
            raise CommandError("Not confirmed; nothing was deleted.")
    get_broker().purge(queue)
    write(f"Purged {queue}.")
    if user is not None and not operations.record_change(
        user, queue, None, operations.PURGED_QUEUE_LOG
    ):
        write(f"Not recorded in the admin history: no database row for {queue}.")


def purge_consumer(opts: dict[str, Any], write: Write) -> None:
    """``redisq purge QUEUE --consumer C``: skip its backlog, discard its retries and
    private input (messages in flight finish), after the consumer's name is typed."""
    queue, consumer = opts["queue"], opts["consumer"]
    user = user_named(opts["user"])
    check_names(queue, consumer)
    if not opts["yes"]:
        answer = input(
            f"Skip the backlog of {queue}/{consumer} and discard its retries and private "
            "input (other consumers keep theirs)? Type the consumer name to confirm: "
        )
        if answer.strip() != consumer:
            raise CommandError("Not confirmed; nothing was purged.")
    before = {c.name: c for c in get_broker().stats(queue).consumers}.get(consumer)
    retries, direct = get_broker().operator.purge_consumer(queue, consumer)
    skipped = f"{before.lag} message(s) of its backlog in the log" if before else "its backlog"
    write(
        f"Purged {queue}/{consumer}: skipped {skipped}, discarded {retries} retries and "
        f"{direct} message(s) of its private input; messages in flight finish as usual."
    )
    _record(user, queue, consumer, [operations.purged_consumer_log(retries, direct)], write)


def add_archives(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``archives`` sub-command's arguments: ``list`` (the default) and ``remove``."""
    p = sub.add_parser(
        "archives",
        parents=common,
        help="the queues' named archives of the history; remove one",
        description="List the named archives (each holds retention until it has stored "
        "what it needs), or remove one: retention then no longer waits for it.",
    )
    p.add_argument("--queue", help="only this queue")
    p.set_defaults(handler=archives)  # and with ``list``, which sets none of its own
    actions = p.add_subparsers(dest="archives_action", metavar="list|remove")
    listing = actions.add_parser("list", parents=common, help="the default")
    listing.add_argument("--queue", default=argparse.SUPPRESS, help="only this queue")
    remove = actions.add_parser(
        "remove", parents=common, help="remove an archive: retention stops waiting for it"
    )
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--queue", help="only from this queue (default: every queue)")
    remove.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_user_option(remove)
    remove.set_defaults(handler=_remove_archive)


def archives(opts: dict[str, Any], write: Write) -> None:
    """``redisq archives [list]``: a table of the archives."""
    queue = opts.get("queue")
    states = named.list_archives([queue] if queue else None)
    if not states:
        write("No archives registered.")
        return
    rows = [["QUEUE", "ARCHIVE", "TABLE", "POSITION", "LAG", "REGISTERED (UTC)", "GAP"]]
    for s in states:
        lag = f"{s.lag}+" if s.lag >= LAG_COUNT_CAP else str(s.lag)
        when, gap = named.registered_at(s), named.gap_text(s)
        rows.append([named.where(s), s.name, s.table, s.position, lag, when, gap])
    write(table(rows))
    write(
        "Retention keeps every entry after each archive's POSITION; LAG: entries it has not "
        "stored yet. Remove one that no longer runs: redisq archives remove NAME."
    )


def _remove_archive(opts: dict[str, Any], write: Write) -> None:
    """``redisq archives remove NAME``: remove one (asks to type its name unless
    ``--yes``)."""
    name, queue = opts["name"], opts["queue"]
    user = user_named(opts["user"])
    where = f"queue {queue!r}" if queue else "every queue"
    if not opts["yes"]:
        answer = input(
            f"Remove archive {name!r} from {where}? Retention will no longer wait for it and "
            "may remove what it has not stored. Type the archive name to confirm: "
        )
        if answer.strip() != name:
            raise CommandError("Not confirmed; nothing was removed.")
    removed = named.remove_archive(name, queue, user=user)
    if not removed:
        raise CommandError(f"Archive {name!r} is not registered on {where}.")
    write(f"Removed archive {name!r} from {', '.join(removed)}.")
