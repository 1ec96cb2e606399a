"""The ``replay`` job: archived messages selected by queue, time range and a SQL predicate
reach exactly the selected target, in order when asked, once when asked, at the rate
asked."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from pyspark.sql import DataFrame, SparkSession

from redisq_django.core import Broker
from redisq_django.pipeline import replay as replay_module
from redisq_django.pipeline.archive import archive_frame
from redisq_django.pipeline.job_options import ReplayOptions
from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.replay import FIRST_SPLIT_BYTES, ReplayError, replay, selected_days
from redisq_django.pipeline.replay_order import _has_keys, _keys_in_footers
from redisq_django.pipeline.schemas import MESSAGES
from redisq_django.pipeline.writer import ORIGINAL_ID_HEADER
from tests.support.reading import read_all

pytestmark = [pytest.mark.spark]

DAY1 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
DAY2 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)


def write_archive(spark: SparkSession, root: Path, rows: list[tuple[Any, ...]]) -> None:
    """Write ``rows`` (queue, message_id, published_at, payload dict[, ordering key]) as
    the archive job lays them out: ROOT/messages/queue=Q/date=D/, in several files per day."""
    data = [
        (queue, mid, f"{int(at.timestamp() * 1000)}-0", at, None, json.dumps(p), None, 1, key)
        for queue, mid, at, p, *rest in rows
        for key in [rest[0] if rest else None]
    ]
    frame = archive_frame(spark.createDataFrame(data, MESSAGES), "messages")
    frame.repartition(3).write.partitionBy("queue", "date").mode("append").parquet(
        f"{root}/messages"
    )


def day_rows(queue: str, start: dt.datetime, n: int, first: int = 0) -> list[tuple[Any, ...]]:
    """``n`` messages one second apart from ``start``, totals 0, 100, 200..."""
    return [
        (
            queue,
            f"m-{first + i}",
            start + dt.timedelta(seconds=i),
            {"n": first + i, "total": i * 100},
        )
        for i in range(n)
    ]


@pytest.fixture
def archived(spark: SparkSession, tmp_path: Path, broker: Broker, queue_name: str) -> Path:
    """40 messages of the test's queue on day 1, 40 on day 2, 10 of another queue on
    day 1; consumers billing and email of the queue registered (nothing pending)."""
    other = f"{queue_name}.mail"
    write_archive(
        spark,
        tmp_path,
        day_rows(queue_name, DAY1, 40)
        + day_rows(queue_name, DAY2, 40, first=40)
        + day_rows(other, DAY1, 10, 100),
    )
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    return tmp_path


@pytest.mark.slow  # a global sort: ~8 s on 2 busy cores
def test_selected_messages_reach_only_the_selected_consumer_in_order(
    spark: SparkSession, archived: Path, broker: Broker, redis_url: str, queue_name: str
) -> None:
    Q = queue_name
    options = ReplayOptions(
        redis_url=redis_url,
        root=str(archived),
        queue=Q,
        since=DAY1 + dt.timedelta(seconds=10),
        until=DAY2 + dt.timedelta(seconds=30),
        where="get_json_object(payload, '$.total') >= 1000",
        consumer="billing",
        ordered=True,
    )

    summary = replay(spark, options)

    # Day 1: seconds 10..39 with total >= 1000 -> n 10..39; day 2: seconds 0..29,
    # totals 0..2900 -> n 50..69 (total >= 1000 from second 10).
    expected = [f"m-{i}" for i in [*range(10, 40), *range(50, 70)]]
    assert (summary.selected, summary.published) == (50, 50)
    got = read_all(broker, Q, "billing")
    assert [m.headers[ORIGINAL_ID_HEADER] for m in got] == expected  # global publish order
    assert read_all(broker, Q, "email") == []
    assert "replayed selected=50 published=50" in summary.line()


def test_to_the_queue_every_consumer_gets_them(
    spark: SparkSession, archived: Path, broker: Broker, redis_url: str, queue_name: str
) -> None:
    Q = queue_name
    options = ReplayOptions(redis_url=redis_url, root=str(archived), queue=Q, until=DAY2)

    assert replay(spark, options).published == 40

    for group in ("billing", "email"):
        got = read_all(broker, Q, group)
        assert sorted(m.headers[ORIGINAL_ID_HEADER] for m in got) == sorted(
            f"m-{i}" for i in range(40)
        )
        assert {m.payload["n"] for m in got} == set(range(40))


def test_on_a_local_master_the_driver_publishes_and_no_python_worker_runs(
    spark: SparkSession,
    archived: Path,
    broker: Broker,
    redis_url: str,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a local master (the shared session's), where the executors share this machine
    assert spark.sparkContext.master.startswith("local")

    # When a replay without a rate runs, with the executors' way of publishing taken away
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay on a local master started Python workers")

    monkeypatch.setattr(DataFrame, "mapInArrow", refused)
    options = ReplayOptions(redis_url=redis_url, root=str(archived), queue=queue_name)
    summary = replay(spark, options)

    # Then every selected message was published, once, from the driver
    assert (summary.selected, summary.published) == (80, 80)
    got = read_all(broker, queue_name, "billing")
    assert sorted(m.headers[ORIGINAL_ID_HEADER] for m in got) == sorted(f"m-{i}" for i in range(80))


@pytest.mark.parametrize("own", [None, "64m"])
def test_a_local_replay_plans_small_splits_and_leaves_the_sessions_setting_as_it_was(
    spark: SparkSession,
    archived: Path,
    redis_url: str,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
    own: str | None,
) -> None:
    # Given a session without a split size of its own, or with one
    key = "spark.sql.files.maxPartitionBytes"
    if own is not None:
        spark.conf.set(key, own)
    planned: list[str | None] = []
    real = replay_module._session_conf

    @contextlib.contextmanager
    def seen(session: SparkSession, name: str, value: str) -> Iterator[None]:
        with real(session, name, value):
            if name == key:  # what the rows are planned with, inside the block
                planned.append(session.conf.get(key, None))
            yield

    monkeypatch.setattr(replay_module, "_session_conf", seen)
    try:
        # When the driver publishes a replay
        options = ReplayOptions(redis_url=redis_url, root=str(archived), queue=queue_name)
        assert replay(spark, options).published == 80

        # Then its rows were planned with 32 MB splits, or the session's own, and the
        # setting is as it was after
        assert planned == [own or FIRST_SPLIT_BYTES]
        assert spark.conf.get(key, None) == own
    finally:
        spark.conf.unset(key)


def test_dry_run_publishes_nothing(
    spark: SparkSession, archived: Path, broker: Broker, redis_url: str, queue_name: str
) -> None:
    Q = queue_name
    options = ReplayOptions(redis_url=redis_url, root=str(archived), queue=Q, dry_run=True)

    summary = replay(spark, options)

    assert (summary.selected, summary.published, summary.dry_run) == (80, 0, True)
    assert [row["message_id"] for row in summary.sample] == ["m-0", "m-1", "m-2", "m-3", "m-4"]
    assert read_all(broker, Q, "billing") == []
    assert broker.client.xlen(broker.keys(Q).log) == 0


@pytest.mark.parametrize("consumer", [None, "billing"])
def test_once_twice_publishes_once(
    spark: SparkSession,
    archived: Path,
    broker: Broker,
    redis_url: str,
    consumer: str | None,
    queue_name: str,
) -> None:
    Q = queue_name
    options = ReplayOptions(
        redis_url=redis_url, root=str(archived), queue=Q, since=DAY2, consumer=consumer, once=True
    )

    replay(spark, options)
    replay(spark, options)  # the same replay again: every id was published already

    got = read_all(broker, Q, "billing")
    assert sorted(m.headers[ORIGINAL_ID_HEADER] for m in got) == sorted(
        f"m-{i}" for i in range(40, 80)
    )
    assert {m.id for m in got} == {options.replay_id(f"m-{i}") for i in range(40, 80)}
    assert len(read_all(broker, Q, "email")) == (0 if consumer else 40)


@pytest.mark.slow
def test_rate_is_a_ceiling(
    spark: SparkSession, archived: Path, broker: Broker, redis_url: str, queue_name: str
) -> None:
    Q = queue_name
    options = ReplayOptions(redis_url=redis_url, root=str(archived), queue=Q, until=DAY2, rate=20)

    started = time.monotonic()
    summary = replay(spark, options)
    elapsed = time.monotonic() - started

    # 40 messages at most 20/s: the last slice may leave no sooner than ~1.5 s after
    # the first (slices of 5 at 20/s from one task, or 10/s each from two).
    assert summary.published == 40
    assert elapsed >= 1.5
    assert len(read_all(broker, Q, "email")) == 40


def test_bad_where_and_missing_archive_say_what_to_do(
    spark: SparkSession, archived: Path, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    Q = queue_name
    bad = ReplayOptions(redis_url=redis_url, root=str(archived), queue=Q, where="no_such > 1")
    with pytest.raises(ReplayError, match=r"not a valid predicate.*columns: .*payload"):
        replay(spark, bad)
    missing = ReplayOptions(redis_url=redis_url, root=str(tmp_path / "none"), queue=Q)
    with pytest.raises(ReplayError, match="run the archive job first"):
        replay(spark, missing)


def test_a_where_failing_on_one_value_publishes_nothing_and_says_which(
    spark: SparkSession,
    broker: Broker,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    request: pytest.FixtureRequest,
) -> None:
    # Given 120 archived messages in several files, and one on a third day whose total is
    # not a number, read one file per task: the smallest file, that one, is read last
    rows = day_rows(queue_name, DAY1, 60) + day_rows(queue_name, DAY2, 60, first=60)
    bad = (queue_name, "m-bad", DAY2 + dt.timedelta(days=1), {"n": 120, "total": "n/a"})
    write_archive(spark, tmp_path, rows)
    write_archive(spark, tmp_path, [bad])
    broker.consumers.ensure(queue_name, "billing")
    # (each file "costs" more to open than a task reads: one file per task)
    spark.conf.set("spark.sql.files.openCostInBytes", str(256 * 1024 * 1024))
    request.addfinalizer(lambda: spark.conf.unset("spark.sql.files.openCostInBytes"))
    # When a replay's predicate casts the totals, which Spark's ANSI mode does strictly
    options = ReplayOptions(
        redis_url=redis_url,
        root=str(tmp_path),
        queue=queue_name,
        where="cast(get_json_object(payload, '$.total') AS INT) >= 0",
        consumer="billing",
    )
    with pytest.raises(ReplayError) as failed:
        replay(spark, options)
    # Then it says which value and what to write instead, and published none of the
    # 120 messages it could have (the predicate runs on every row before any publishing)
    message = str(failed.value)
    assert "'n/a'" in message and "CAST_INVALID_INPUT" in message, message
    assert "Nothing was published" in message and "try_cast(" in message
    assert "\n" not in message
    assert read_all(broker, queue_name, "billing") == []


def test_options_are_checked_before_spark() -> None:
    Q = "orders"
    with pytest.raises(OptionError, match="must be before --until"):
        ReplayOptions(redis_url="redis://x", root="/r", queue=Q, since=DAY2, until=DAY1)
    with pytest.raises(OptionError, match="--rate must be > 0"):
        ReplayOptions(redis_url="redis://x", root="/r", queue=Q, rate=0)


def test_cli_dry_run_and_replay(
    spark: SparkSession,
    archived: Path,
    broker: Broker,
    redis_url: str,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from redisq_django.pipeline.cli import main

    base = ["replay", "--redis-url", redis_url, "--root", str(archived), "--queue", queue_name]

    assert main([*base, "--since", "2026-11-02", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("replay dry run: selected=40 published=0")
    assert "m-40" in err  # the sample

    assert main([*base, "--until", "2026-11-01", "--dry-run"]) == 0  # a date: its whole day
    assert capsys.readouterr().out.startswith("replay dry run: selected=40 published=0")

    assert main([*base, "--until", "2026-11-01T00:00:05", "--consumer", "email"]) == 0
    assert capsys.readouterr().out.startswith("replayed selected=5 published=5")
    assert len(read_all(broker, queue_name, "email")) == 5
    assert read_all(broker, queue_name, "billing") == []

    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--since", "yesterday"])
    assert exit_info.value.code == 2
    assert "--since expects an ISO date or time" in capsys.readouterr().err


def test_manage_py_replay_uses_the_redis_and_archive_of_settings(
    spark: SparkSession, archived: Path, broker: Broker, queue_name: str, redisq_settings: Any
) -> None:
    from io import StringIO

    from django.core.management import call_command

    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "ARCHIVE_ROOT": str(archived)}
    out = StringIO()
    call_command(
        "redisq_pipeline",
        *("replay", "--queue", queue_name, "--until", "2026-11-01", "--consumer", "billing"),
        stdout=out,
        stderr=StringIO(),
    )
    assert out.getvalue().startswith("replayed selected=40 published=40")
    assert len(read_all(broker, queue_name, "billing")) == 40


def test_a_replay_keeps_the_order_of_each_ordering_key(
    spark: SparkSession, tmp_path: Path, broker: Broker, redis_url: str, queue_name: str
) -> None:
    # Given 3 keys' messages over two days, several files a day, the second day's files
    # the largest (Spark reads the largest first), and some messages without a key
    Q = queue_name
    rows = []
    for day, first, pad in ((DAY1, 0, ""), (DAY2, 60, "x" * 2000)):
        for i in range(60):
            n = first + i
            payload = {"n": n, "pad": pad}
            rows.append((Q, f"m-{n}", day + dt.timedelta(seconds=i), payload, f"k{i % 3}"))
        rows.append((Q, f"free-{first}", day, {"n": -1, "pad": pad}))
    write_archive(spark, tmp_path, rows)
    broker.consumers.ensure(Q, "billing")

    # When they are replayed without a global order
    summary = replay(spark, ReplayOptions(redis_url=redis_url, root=str(tmp_path), queue=Q))

    # Then each key's messages are published in their original order (a different key's,
    # or one without a key, may come in between)
    assert summary.published == 122
    got = read_all(broker, Q, "billing")
    for key in ("k0", "k1", "k2"):
        ns = [m.payload["n"] for m in got if m.key == key]
        assert ns == sorted(ns) and len(ns) == 40, key
    assert sum(m.key is None for m in got) == 2


@pytest.mark.parametrize("ordered", [False, True])
def test_a_batch_published_in_one_millisecond_is_replayed_in_its_order(
    spark: SparkSession,
    tmp_path: Path,
    broker: Broker,
    redis_url: str,
    queue_name: str,
    ordered: bool,
) -> None:
    # Given 3 keys' messages published in batches of 25 within one millisecond each (entry
    # ids ms-0 … ms-24: as text, "ms-18" sorts before "ms-5")
    Q = queue_name
    data = []
    for batch in range(2):
        at = DAY1 + dt.timedelta(seconds=batch)
        ms = int(at.timestamp() * 1000)
        for seq in range(25):
            n = batch * 25 + seq
            payload = json.dumps({"n": n})
            data.append((Q, f"m-{n}", f"{ms}-{seq}", at, None, payload, None, 1, f"k{n % 3}"))
    frame = archive_frame(spark.createDataFrame(data, MESSAGES), "messages")
    frame.repartition(3).write.partitionBy("queue", "date").parquet(f"{tmp_path}/messages")
    broker.consumers.ensure(Q, "billing")

    # When they are replayed (by key over several tasks, or globally ordered)
    options = ReplayOptions(redis_url=redis_url, root=str(tmp_path), queue=Q, ordered=ordered)
    assert replay(spark, options).published == 50

    # Then every key's messages come in their entry ids' order; ordered, all of them do
    got = read_all(broker, Q, "billing")
    for key in ("k0", "k1", "k2"):
        ns = [m.payload["n"] for m in got if m.key == key]
        assert ns == sorted(ns) and len(ns) in (16, 17), (key, ns)
    if ordered:
        assert [m.payload["n"] for m in got] == list(range(50))


def test_whether_the_selection_holds_keys_is_read_from_the_footers_as_spark_answers(
    spark: SparkSession, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue whose day 1 has no key, whose day 2 has one message with a key, and
    # another queue with a key on day 1
    Q, other = queue_name, f"{queue_name}.mail"
    keyed = (Q, "m-keyed", DAY2 + dt.timedelta(hours=1), {"n": 1}, "order-1")
    elsewhere = (other, "m-other", DAY1, {"n": 2}, "order-2")
    write_archive(spark, tmp_path, [*day_rows(Q, DAY1, 10), keyed, elsewhere])

    def answers(since: dt.datetime, until: dt.datetime | None) -> tuple[Any, bool, bool]:
        options = ReplayOptions(
            redis_url="redis://127.0.0.1:1/0", root=str(tmp_path), queue=Q, since=since,
            until=until,
        )  # fmt: skip
        days = selected_days(spark, options)
        spark_says = not days.where("key IS NOT NULL").isEmpty()
        return _keys_in_footers(days, options), _has_keys(days, options), spark_says

    # When the replay asks for day 1, then the footers say "no key" as Spark does (the
    # other queue's key and day 2's do not count)
    assert answers(DAY1, DAY1 + dt.timedelta(hours=12)) == (False, False, False)
    # And for both days "a key", as Spark does
    assert answers(DAY1, None) == (True, True, True)

    # And a file whose footer has no null counts (not written by Spark) is left to Spark
    day3 = tmp_path / "messages" / f"queue={Q}" / "date=2026-11-03"
    day3.mkdir(parents=True)
    table = pa.table({"message_id": ["m-3"], "key": ["order-3"]})
    pq.write_table(table, day3 / "part-by-hand.parquet", write_statistics=False)
    assert answers(DAY2 + dt.timedelta(days=1), None) == (None, True, True)
