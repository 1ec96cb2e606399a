"""Profile where a ``publish_on_commit`` transaction spends its time (not part of
``make bench``).

Sets Django up in this process as ``bench/run.py`` does (``benchproject.settings``, an
on-disk SQLite file in a temporary directory, a private redis-server), then runs
``--txns`` transactions of 100 ``publish_on_commit`` calls under cProfile. Prints the top
functions and writes ``bench/out/commit[-outbox].pstats``. ``--no-profile`` only times
it, next to the hand-written pipeline of ``run.py`` and the path before the batch per
transaction (one ``on_commit`` send, or outbox relay, per message), and splits our
time into the calls (in the transaction) and the commit + send.

    .venv/bin/python bench/profile_commit.py
    .venv/bin/python bench/profile_commit.py --outbox --sort cumulative
    .venv/bin/python bench/profile_commit.py --no-profile
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

from run import COMMIT_QUEUE, OUT, PAYLOAD, PER_TXN, redis_binary, setup_django  # noqa: E402

from tests.support.redis_server import RedisServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=200)
    ap.add_argument("--outbox", action="store_true", help='REDISQ["OUTBOX"] = True')
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--no-profile", action="store_true", help="time only")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="redisq-prof-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            setup_django(server.url, tmp / "db.sqlite3")
            from django.conf import settings
            from django.db import transaction
            from django.test import override_settings

            from redisq_django import publish_on_commit
            from redisq_django.models import OutboxMessage

            client = server.client()

            def txn() -> None:
                with transaction.atomic():
                    for _ in range(PER_TXN):
                        publish_on_commit(COMMIT_QUEUE, PAYLOAD)

            def raw_txn() -> None:
                with transaction.atomic():
                    datas = [
                        json.dumps(PAYLOAD, separators=(",", ":")).encode() for _ in range(PER_TXN)
                    ]
                with client.pipeline(transaction=False) as pipe:
                    for data in datas:
                        pipe.execute_command("XADD", "raw:{txn}:log", "*", "payload", data)
                    pipe.execute()

            def per_message_txn() -> None:
                # Before the batch per transaction: one on_commit callback, and so one
                # round trip (outbox: one relay of one row), per message.
                from redisq_django.connection import get_broker
                from redisq_django.core.envelope import new_message_id
                from redisq_django.publishing import outbox

                broker = get_broker()
                with transaction.atomic():
                    for _ in range(PER_TXN):
                        e = broker.prepare(COMMIT_QUEUE, PAYLOAD, id=new_message_id())
                        if args.outbox:
                            pk = outbox.store(e).pk
                            transaction.on_commit(functools.partial(outbox.relay_rows, [pk]))
                        else:
                            transaction.on_commit(functools.partial(broker.send, [e]))

            def rate(fn: Callable[[], None], n: int = args.txns) -> float:
                t = time.perf_counter()
                for _ in range(n):
                    fn()
                elapsed = time.perf_counter() - t
                OutboxMessage.objects.all().delete()  # sent rows: same table size each time
                return n * PER_TXN / elapsed

            with override_settings(REDISQ={**settings.REDISQ, "OUTBOX": args.outbox}):
                txn()  # warm-up
                raw_txn()
                if args.no_profile:
                    for _ in range(3):
                        # The per-message outbox path is ~100x slower: fewer of them.
                        before = rate(per_message_txn, max(1, args.txns // 20))
                        print(
                            f"ours {rate(txn):,.0f} msg/s   raw {rate(raw_txn):,.0f} msg/s   "
                            f"one on_commit per message {before:,.0f} msg/s"
                        )
                    split(args.txns)
                    return 0
                prof = cProfile.Profile()
                t = time.perf_counter()
                prof.enable()
                for _ in range(args.txns):
                    txn()
                prof.disable()
                elapsed = time.perf_counter() - t
        finally:
            server.stop()

    name = "commit-outbox" if args.outbox else "commit"
    prof.dump_stats(OUT / f"{name}.pstats")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(args.sort).print_stats(args.top)
    print(f"{args.txns} x {PER_TXN} messages in {elapsed:.2f} s under cProfile")
    print(buf.getvalue())
    return 0


def split(txns: int) -> None:
    """Time the calls inside the transaction, the commit, and the send (or outbox relay)
    after it apart."""
    from django.db import transaction

    from redisq_django import publish_on_commit

    calls = commit = send = 0.0
    committed = 0.0

    def mark() -> None:  # registered first, so it runs after the commit, before our batch
        nonlocal committed
        committed = time.perf_counter()

    for _ in range(txns):
        t0 = time.perf_counter()
        with transaction.atomic():
            transaction.on_commit(mark)
            for _ in range(PER_TXN):
                publish_on_commit(COMMIT_QUEUE, PAYLOAD)
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        calls += t1 - t0
        commit += committed - t1
        send += t2 - committed
    n = txns * PER_TXN
    print(
        f"per message: {calls / n * 1e6:.2f} us in the publish_on_commit calls, "
        f"{commit / n * 1e6:.2f} us in the commit, {send / n * 1e6:.2f} us in the send "
        "(or relay) after it"
    )


if __name__ == "__main__":
    sys.exit(main())
