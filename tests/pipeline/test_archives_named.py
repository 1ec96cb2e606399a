"""C14 on Spark: only a named archive holds retention; an ad-hoc stream, a second archive
or a default never lets retention remove what an archive still needs; data a hard cap
removes anyway is reported (``failOnDataLoss``), never skipped silently."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.archives.named import Gap
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.cli import main
from redisq_django.pipeline.options import ArchiveOptions, JobError
from redisq_django.pipeline.report import ReportOptions, report
from tests.pipeline.archive_support import SLOW_WORKER, publish

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def ack_all(broker: Broker, queue: str, consumer: str = "billing") -> int:
    """Deliver and acknowledge everything waiting for ``consumer``; how many."""
    done = 0
    with broker.subscribe(queue, consumer) as sub:
        for _ in range(100):  # bounded: at most 100 fetches of 500
            batch = sub.fetch(count=500, block_ms=20)
            if not batch:
                return done
            sub.ack(batch)
            done += len(batch)
    return done


def message_ids(spark: SparkSession, path: Path | str) -> list[str]:
    return [r.message_id for r in spark.read.parquet(str(path)).select("message_id").collect()]


def run_stream(spark: SparkSession, stream: Any, checkpoint: Path, **sink: str) -> Any:
    """A streaming query with trigger availableNow, run to its end. A query whose Python
    worker was too slow to start (a busy host, not what a test here is about) runs again
    from its checkpoint, twice at most, as the archive job's restarts do."""
    fmt = sink.pop("format")
    writer = stream.writeStream.format(fmt).options(**sink)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if fmt == "memory":
        query = query.queryName(sink.get("name", "adhoc"))
    for _ in range(3):
        started = query.start()
        with contextlib.suppress(StreamingQueryException):  # the caller reads .exception()
            started.awaitTermination(120)
        started.stop()
        if SLOW_WORKER not in str(started.exception() or ""):
            break
    return started


def queue_state(client: redis.Redis, broker: Broker, queue: str) -> dict[str, Any]:
    """Everything of ``queue`` in Redis but its streams' entries: the keys, the archive
    registry, the counters and marks (what a read-only stream must never change)."""
    keys = broker.keys(queue)
    return {
        "keys": sorted(client.keys(f"{keys.tag}:*")),
        "archives": client.hgetall(keys.archives),
        "meta": client.hgetall(keys.meta),
    }


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_an_adhoc_stream_and_a_second_archive_beside_the_archive_lose_nothing(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given history on, no replay window, a consumer that acks, and the archive job,
    # which has archived what was there so far
    broker = Broker(redis_client, CoreConfig(history=True, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing")
    ids = publish(broker, queue_name, 300)
    ack_all(broker, queue_name)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path / "main"), queues=(queue_name,))
    assert archive(spark, options).messages.rows == 300
    read = {"url": redis_url, "queue": queue_name}
    changed = []
    for round_ in range(2):
        # When more is published and acked, while an ad-hoc stream (to memory: no
        # option archive) and a second named archive (to Parquet) read the queue, and
        # retention runs
        ids += publish(broker, queue_name, 500, start=1000 * (round_ + 1))
        ack_all(broker, queue_name)
        before = queue_state(redis_client, broker, queue_name)
        adhoc = spark.readStream.format("redisq").options(**read).load()
        run_stream(spark, adhoc, tmp_path / f"adhoc-{round_}", format="memory", name=f"a{round_}")
        in_log = redis_client.xlen(broker.keys(queue_name).log)
        assert spark.sql(f"SELECT count(*) FROM a{round_}").first()[0] == in_log
        changed.append(queue_state(redis_client, broker, queue_name) != before)
        second = spark.readStream.format("redisq").options(**read, archive="second").load()
        run_stream(
            spark,
            second.select("message_id"),
            tmp_path / "second-cp",
            format="parquet",
            path=str(tmp_path / "second"),
        )
        for _ in range(3):
            broker.trim(queue_name)
    # Then the archive, run again, stores every message, and so did the second one
    assert archive(spark, options).messages.rows == len(ids) - 300
    archived = message_ids(spark, tmp_path / "main" / "messages")
    assert sorted(archived) == sorted(ids)  # 0 lost, 0 twice
    assert sorted(message_ids(spark, tmp_path / "second")) == sorted(ids)
    # And the ad-hoc streams wrote nothing to Redis: the two archives hold retention,
    # and with both done, retention removes everything
    assert changed == [False, False]
    assert {s.name for s in broker.archives.states(queue_name)} == {"default", "second"}
    for _ in range(3):
        broker.trim(queue_name)
    assert redis_client.xlen(broker.keys(queue_name).log) == 0
    assert broker.stats(queue_name).dropped == 0


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_hard_cap_past_the_archive_stops_it_naming_the_gap_unless_told_to_go_on(
    spark: SparkSession,
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an archive that stored 50 messages, then a hard cap of 100 entries with a
    # slow consumer: 200 messages after the archive's position are dropped
    broker = Broker(redis_client, CoreConfig(max_len=100, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    root = tmp_path / "archive"
    ids = publish(broker, queue_name, 50)
    argv = ["archive", "--redis-url", redis_url, "--root", str(root), "--queue", queue_name]
    assert main([*argv, "--once"]) == 0
    ids += publish(broker, queue_name, 300, start=50)
    assert broker.trim(queue_name) == (0, 250)
    assert broker.archives.gap(queue_name, "default", "messages") == Gap(ids[50], ids[249], 200)
    capsys.readouterr()

    # When the archive job runs (failOnDataLoss by default)
    code = main([*argv, "--once"])

    # Then it stops with exit status 1 and one line naming the gap, storing nothing more
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err  # what it is about to do, and why it stopped
    assert err[1] == (
        "python -m redisq_django.pipeline archive: failed: archive stopped: Data loss in the "
        f"messages of queue {queue_name!r}: entries {ids[50]} to {ids[249]} (200) were "
        "removed before archive 'default' read them (dropped by the hard cap, MAX_LENGTH / "
        "MAX_AGE). Set failOnDataLoss=false to go on from what is left (the archive job: "
        "--no-fail-on-data-loss), or raise the cap."
    )
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[49]}
    assert len(message_ids(spark, root / "messages")) == 50

    # When it runs with --no-fail-on-data-loss
    assert main([*argv, "--once", "--no-fail-on-data-loss"]) == 0

    # Then it stores what is left, says what it never will, and records it for the report
    out = capsys.readouterr().out
    assert f"archived messages=100 events=0 ({queue_name}: 100/0)" in out
    gap_line = f"{queue_name} messages: entries {ids[50]} to {ids[249]} (200)"
    assert f"never archived (failOnDataLoss off, recorded in ROOT/_gaps): {gap_line}" in out
    assert sorted(message_ids(spark, root / "messages")) == sorted(ids[:50] + ids[250:])
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[-1]}
    assert broker.archives.gap(queue_name, "default", "messages") is None
    assert broker.archives.losses(queue_name, "default") == []
    # And the report names the gap
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    made = report(spark, ReportOptions(root=str(root), out=str(tmp_path / "r"), since=since))
    html = made.html.read_text()
    assert f"{gap_line} never archived: dropped by the hard cap" in html
    # And a run with nothing new has nothing more to say
    assert main([*argv, "--once"]) == 0
    assert "never archived" not in capsys.readouterr().out


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_purge_past_the_archive_stops_it_naming_the_purge_unless_told_to_go_on(
    spark: SparkSession,
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an archive that stored 50 messages, then 500 more it has not stored yet
    broker = Broker(redis_client, CoreConfig(replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    root = tmp_path / "archive"
    ids = publish(broker, queue_name, 50)
    argv = ["archive", "--redis-url", redis_url, "--root", str(root), "--queue", queue_name]
    assert main([*argv, "--once"]) == 0
    ids += publish(broker, queue_name, 500, start=50)
    assert [(u.name, u.count) for u in broker.archives.unarchived(queue_name)] == [("default", 500)]
    # When the queue is purged, and 20 messages are published after it
    broker.purge(queue_name)
    gap = broker.archives.gap(queue_name, "default", "messages")
    assert gap is not None and gap.purge is not None
    assert (gap.first, gap.last, gap.count) == (ids[50], ids[549], 500)
    at = dt.datetime.fromtimestamp(gap.purge.at_ms / 1000, dt.UTC)
    purged = f"removed by a purge at {at:%Y-%m-%d %H:%M:%S} UTC"
    ids += publish(broker, queue_name, 20, start=550)
    capsys.readouterr()

    # When the archive job runs (failOnDataLoss by default)
    code = main([*argv, "--once"])

    # Then it stops with exit status 1 naming the purge, storing nothing more
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        "python -m redisq_django.pipeline archive: failed: archive stopped: Data loss in the "
        f"messages of queue {queue_name!r}: entries {ids[50]} to {ids[549]} (500) were "
        f"removed before archive 'default' read them ({purged}). Set failOnDataLoss=false "
        "to go on from what is left (the archive job: --no-fail-on-data-loss): nothing "
        "brings purged messages back."
    )
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[49]}
    assert len(message_ids(spark, root / "messages")) == 50

    # When it runs with --no-fail-on-data-loss
    assert main([*argv, "--once", "--no-fail-on-data-loss"]) == 0

    # Then it stores what came after the purge, and says what it never will, and why
    out = capsys.readouterr().out
    gap_line = f"{queue_name} messages: entries {ids[50]} to {ids[549]} (500)"
    assert f"recorded in ROOT/_gaps): {gap_line}, {purged}" in out
    assert sorted(message_ids(spark, root / "messages")) == sorted(ids[:50] + ids[550:])
    assert broker.archives.gap(queue_name, "default", "messages") is None
    # And ROOT/_gaps and the report name the purge, not the hard cap
    (row,) = spark.read.json(str(root / "_gaps")).collect()
    assert (row.first, row.last, row["count"], row.purged, row.purged_ms) == (
        ids[50],
        ids[549],
        500,
        500,
        gap.purge.at_ms,
    )
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    made = report(spark, ReportOptions(root=str(root), out=str(tmp_path / "r"), since=since))
    html = made.html.read_text()
    assert f"{gap_line} never archived: {purged}" in html
    assert "hard cap" not in html


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_readonly_stream_fails_when_retention_passed_it_or_goes_on_when_told(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a read-only stream that read the first 100 messages
    broker = Broker(redis_client, CoreConfig(replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    ids = publish(broker, queue_name, 100)
    options = {"url": redis_url, "queue": queue_name}

    def run(name: str, **more: str) -> Any:
        stream = spark.readStream.format("redisq").options(**options, **more).load()
        sink = {"format": "parquet", "path": str(tmp_path / name)}
        return run_stream(spark, stream.select("message_id"), tmp_path / f"{name}-cp", **sink)

    assert run("strict").exception() is None
    assert run("lenient", failOnDataLoss="false").exception() is None
    # When the consumer acks everything and retention removes it, and more arrives
    ack_all(broker, queue_name)
    more = publish(broker, queue_name, 50, start=100)
    ack_all(broker, queue_name)
    assert broker.trim(queue_name) == (150, 0)
    more += publish(broker, queue_name, 20, start=150)

    # Then the stream fails, naming what it lost (it holds nothing: it never
    # registered), and reads nothing more
    failure = str(run("strict").exception())
    assert (
        f"DataLossError: Data loss in the messages of queue {queue_name!r}: entries after "
        f"{ids[-1]} up to {more[49]} were removed before this stream read them"
    ) in failure
    assert len(message_ids(spark, tmp_path / "strict")) == 100
    # And with failOnDataLoss=false it goes on with what is left
    assert run("lenient", failOnDataLoss="false").exception() is None
    assert sorted(message_ids(spark, tmp_path / "lenient")) == sorted(ids + more[50:])
    assert broker.archives.states(queue_name) == []


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_upgrading_keeps_what_the_unnamed_archive_had_not_stored(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given what an earlier version left: an archive (checkpoint and files) of 200
    # messages, its position in meta's "archive:messages", and no named archive
    broker = Broker(redis_client, CoreConfig(history=True, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    ids = publish(broker, queue_name, 200)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    archive(spark, options)
    keys = broker.keys(queue_name)
    redis_client.delete(keys.archives)
    redis_client.hset(keys.meta, "archive:messages", ids[-1])
    # When more is published and acked, an ad-hoc named archive registers, and
    # retention runs before the upgraded archive job
    ids += publish(broker, queue_name, 300, start=200)
    ack_all(broker, queue_name)
    stream = spark.readStream.format("redisq").options(
        url=redis_url, queue=queue_name, archive="notebook", startingOffsets="latest"
    )
    run_stream(spark, stream.load(), tmp_path / "nb", format="memory", name="nb")
    for _ in range(3):
        broker.trim(queue_name)
    # Then nothing after the old position went
    log = [i.decode() for i, _ in redis_client.xrange(keys.log)]
    assert log == ids[200:]
    # When the archive job (named "default") runs: it takes the old position over
    summary = archive(spark, options)
    assert summary.messages.rows == 300 and summary.notes == ()
    assert sorted(message_ids(spark, tmp_path / "messages")) == sorted(ids)
    assert redis_client.hget(keys.meta, "archive:messages") is None
    assert broker.archives.positions(queue_name, "default")["messages"] == ids[-1]


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_removed_archive_stops_and_registers_again_only_when_started(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive of 30 messages, then removed (retention no longer waits for it)
    broker = Broker(redis_client, CoreConfig())
    ids = publish(broker, queue_name, 30)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    archive(spark, options)
    assert broker.archives.remove(queue_name, "default") == 1
    # When it is started again: it registers again where its checkpoint is, and says so
    ids += publish(broker, queue_name, 10, start=30)
    summary = archive(spark, options)
    assert summary.messages.rows == 10
    assert summary.notes == (
        f"archive 'default' was not registered for the messages of queue {queue_name!r} "
        f"(removed, or a new Redis): registered again at {ids[29]}, where its checkpoint is",
    )
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[-1]}


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_second_stream_under_an_archives_name_is_refused_unless_it_takes_over(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    """Issue 37.2: a notebook's ``.option("archive", "default")`` beside production's
    archive lost 1,000 of 4,000 messages: retention followed whichever moved last."""
    broker = Broker(redis_client, CoreConfig(replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    read = {"url": redis_url, "queue": queue_name, "archive": "default"}

    def run(name: str, **more: str) -> Any:
        stream = spark.readStream.format("redisq").options(**read, **more).load()
        sink = {"format": "parquet", "path": str(tmp_path / name)}
        return run_stream(spark, stream.select("message_id"), tmp_path / f"{name}-cp", **sink)

    def trim_all() -> None:
        ack_all(broker, queue_name)
        for _ in range(3):
            broker.trim(queue_name)

    # Given production's stream archived 100 messages under "default"
    ids = publish(broker, queue_name, 100)
    assert run("prod").exception() is None
    # When a second stream (its own checkpoint) starts under the same name
    failure = str(run("notebook").exception())
    # Then it is refused, saying why and what to do, and moves nothing
    assert (
        f"ArchiveOwned: The archive 'default' of the messages of queue {queue_name!r} "
        "belongs to another reader with another checkpoint"
    ) in failure
    assert "name of its own (option archive, --name)" in failure and "takeOver=true" in failure
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[-1]}
    # And production goes on, and retention follows production only
    ids += publish(broker, queue_name, 50, start=100)
    assert run("prod").exception() is None
    trim_all()
    assert redis_client.xlen(broker.keys(queue_name).log) == 0
    assert sorted(message_ids(spark, tmp_path / "prod")) == sorted(ids)

    # When a replacement stream takes the name over (option takeOver)
    more = publish(broker, queue_name, 40, start=150)
    assert run("replacement", takeOver="true").exception() is None
    # Then it goes on from production's position, and retention follows it
    assert sorted(message_ids(spark, tmp_path / "replacement")) == sorted(more)
    trim_all()
    # And production, started again, stops saying it was taken over (not a data loss,
    # although retention removed what it never read), and stores nothing more
    publish(broker, queue_name, 10, start=190)
    failure = str(run("prod").exception())
    assert (
        f"ArchiveOwned: The archive 'default' of the messages of queue {queue_name!r} was "
        "taken over by another reader"
    ) in failure
    assert "DataLossError" not in failure
    assert sorted(message_ids(spark, tmp_path / "prod")) == sorted(ids)
    assert run("replacement").exception() is None


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_the_archive_job_under_a_taken_name_is_refused_and_take_over_fences_the_owner(
    spark: SparkSession,
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A staging job left at ``--name``'s default, pointed at production's Redis."""
    broker = Broker(redis_client, CoreConfig(replay_window_ms=0))
    ids = publish(broker, queue_name, 30)
    base = ["archive", "--redis-url", redis_url, "--queue", queue_name, "--once"]
    prod, staging = (
        [*base, "--root", str(tmp_path / "prod")],
        [*base, "--root", str(tmp_path / "st")],
    )
    assert main(prod) == 0
    capsys.readouterr()
    # When the staging job runs under the same name: exit 1, one line saying why
    assert main(staging) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err  # what it is about to do, and why it stopped
    assert "The archive 'default' of the messages" in err[1], err
    assert "--take-over" in err[1] and "name of its own" in err[1]
    assert broker.archives.positions(queue_name, "default") == {"messages": ids[-1]}
    # When it is given --take-over (it replaces production's archive): it goes on from
    # production's position, saying so
    ids += publish(broker, queue_name, 5, start=30)
    assert main([*staging, "--take-over"]) == 0
    err = capsys.readouterr().err
    assert "taken over (--take-over)" in err, err
    assert sorted(message_ids(spark, tmp_path / "st" / "messages")) == sorted(ids[30:])
    # Then production's next run stops, saying it was taken over
    publish(broker, queue_name, 5, start=35)
    assert main(prod) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "was taken over by another reader" in err[-1], err
    assert len(message_ids(spark, tmp_path / "prod" / "messages")) == 30


@pytest.mark.timeout(400)  # several Spark queries in a row on shared cores
def test_a_checkpoint_of_an_earlier_version_goes_on_and_claims_the_name(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive whose checkpoint and registration an earlier version wrote: no
    # owner token in its offsets, no owner in Redis
    broker = Broker(redis_client, CoreConfig(replay_window_ms=0))
    ids = publish(broker, queue_name, 20)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path / "a"), queues=(queue_name,))
    archive(spark, options)
    offsets = tmp_path / "a" / "_checkpoints" / "messages" / "offsets"
    for log in offsets.iterdir():
        if log.name.isdigit():
            log.write_text(re.sub(r'"@owner":"[0-9a-f]+",?', "", log.read_text()))
    keys = broker.keys(queue_name)
    owner_fields = [f for f in redis_client.hkeys(keys.archives) if b":owner" in f]
    redis_client.hdel(keys.archives, *owner_fields)
    # When it runs again: it goes on from its checkpoint, without a note
    ids += publish(broker, queue_name, 10, start=20)
    summary = archive(spark, options)
    assert summary.messages.rows == 10 and summary.notes == ()
    assert sorted(message_ids(spark, tmp_path / "a" / "messages")) == sorted(ids)
    # Then it owns the name: its newest logged offset carries the token Redis holds
    newest = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    token = json.loads(newest.read_text().splitlines()[2])["@owner"]
    assert redis_client.hget(keys.archives, "default:messages:owner") == token.encode()
    # And another archive under its name is refused
    with pytest.raises(JobError, match="belongs to another reader"):
        archive(spark, dataclasses.replace(options, root=str(tmp_path / "b")))


def test_bad_options_fail_at_load_with_a_short_message(spark: SparkSession, redis_url: str) -> None:
    def read(**options: str) -> Any:
        return spark.read.format("redisq").option("url", redis_url).options(**options)

    def stream(**options: str) -> Any:
        return spark.readStream.format("redisq").option("url", redis_url).options(**options)

    cases = [
        (
            read(queues="a"),
            "Unknown option 'queues' of the redisq data source (did you mean 'queue'?). "
            "Valid options: url, prefix, cluster, queue,",
        ),
        (
            stream(commitArchive="false"),
            "Option 'commitArchive' was removed: a stream is read-only unless option "
            "'archive' names it",
        ),
        (read(slicesPerStream="0"), "Option 'slicesPerStream' must be > 0, got 0."),
        (read(cluster="maybe"), "Option 'cluster' must be true or false"),
        (
            stream(startingOffsets="yesterday"),
            "Option 'startingOffsets' must be earliest, latest, an ISO 8601 time or a JSON "
            "object of entry ids; got 'yesterday'.",
        ),
        (stream(startingOffsets='{"a": 5}'), "Option 'startingOffsets' as JSON"),
        (stream(archive="a:b"), "Option 'archive': Invalid archive name 'a:b'"),
        (stream(table="dead", archive="x"), "Option 'archive' names an archive of messages"),
        (stream(takeOver="true"), "Option 'takeOver' takes a named archive over"),
        (stream(archive="x", takeOver=""), "Option 'takeOver' is empty"),
    ]
    for frame, says in cases:
        with pytest.raises(Exception) as caught:
            frame.load()
        text = str(caught.value)
        # Spark's own first line, one frame of ours, then our message and Spark's SQLSTATE
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(text) < 700 and len(lines) <= 5, text
        assert lines[-2].startswith(f"redisq_django.pipeline.options.OptionError: {says}")
    with pytest.raises(Exception, match="takes no path"):
        read().load("orders")
