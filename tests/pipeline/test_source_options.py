"""The ``redisq`` data source's options as the driver parses them (no Spark needed): the
options renamed for 1.0 (a partition is a queue's; what one Spark task reads is a slice)
still work under their names of 0.9, with a warning that names the new one."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.source_options import SourceOptions, check_names, check_use

URL = "redis://localhost:6379/0"


def test_slices_per_stream_and_max_entries_per_slice_are_read() -> None:
    parsed = SourceOptions.parse({"url": URL, "slicesPerStream": "8", "maxEntriesPerSlice": "500"})
    assert (parsed.slices_per_stream, parsed.max_entries_per_slice) == (8, 500)
    default = SourceOptions.parse({"url": URL})
    assert (default.slices_per_stream, default.max_entries_per_slice) == (4, 100_000)


def test_the_names_of_0_9_still_work_and_say_the_new_one(caplog: pytest.LogCaptureFixture) -> None:
    # Given options under their names of 0.9
    old = {"url": URL, "partitions": "8", "maxEntriesPerPartition": "500"}

    # When they are parsed, then they mean what the new names mean, each with a warning
    # (and a log line: Spark's Python workers show no DeprecationWarning)
    with (
        caplog.at_level(logging.WARNING, "redisq.pipeline"),
        pytest.warns(DeprecationWarning) as warned,
    ):
        parsed = SourceOptions.parse(old)
    assert (parsed.slices_per_stream, parsed.max_entries_per_slice) == (8, 500)
    texts = [str(w.message) for w in warned]
    assert any("'partitions'" in t and "use 'slicesPerStream'" in t for t in texts)
    assert any("'maxEntriesPerPartition'" in t and "use 'maxEntriesPerSlice'" in t for t in texts)
    assert sum("is deprecated" in r.getMessage() for r in caplog.records) == 2

    # And an invalid value names the option as it was given
    with pytest.warns(DeprecationWarning), pytest.raises(OptionError, match="'partitions' must"):
        SourceOptions.parse({"url": URL, "partitions": "0"})


def test_one_option_under_both_names_is_refused() -> None:
    with pytest.raises(OptionError, match="'partitions' and 'slicesPerStream' are one option"):
        SourceOptions.parse({"url": URL, "partitions": "2", "slicesPerStream": "3"})


def test_a_misspelt_option_is_pointed_at_the_new_name_never_the_old_one() -> None:
    check_names({"url": URL, "Partitions": "2"})  # the old name is still accepted
    with pytest.raises(OptionError) as refused:
        check_names({"url": URL, "slicesPerStrem": "2"})
    assert "did you mean 'slicesPerStream'?" in str(refused.value)
    assert "partitions" not in str(refused.value)


def test_the_options_of_jobs_and_of_the_data_source_have_one_error() -> None:
    from redisq_django.core.errors import RedisqError
    from redisq_django.pipeline import options, source_options

    # One class, under the root of every redisq error, still a ValueError...
    assert source_options.OptionError is options.OptionError
    assert issubclass(OptionError, RedisqError) and issubclass(OptionError, ValueError)
    with pytest.raises(RedisqError, match="'url'"):
        SourceOptions.parse({})
    # ...and the jobs' name of 0.9 is it, with a warning
    with pytest.warns(DeprecationWarning, match="OptionsError is now OptionError"):
        assert options.OptionsError is OptionError


@pytest.mark.parametrize("name", ["failOnDataLoss", "once", "cluster"])
def test_an_empty_flag_is_refused_not_read_as_false(name: str) -> None:
    # An unset template value ("${FAIL_ON_DATA_LOSS}" rendered empty) must not turn off
    # the stop on data loss or the idempotent write
    with pytest.raises(OptionError, match=f"Option '{name}' is empty"):
        SourceOptions.parse({"url": "redis://h/0", name: ""})
    assert SourceOptions.parse({"url": "redis://h/0"}).fail_on_data_loss is True


@pytest.mark.parametrize(
    ("option", "use", "belongs"),
    [
        ("since", "stream", "a batch read"),
        ("until", "write", "a batch read"),
        ("failOnDataLoss", "read", "a streaming read"),
        ("startingOffsets", "read", "a streaming read"),
        ("archive", "write", "a streaming read"),
        ("maxRecordsPerTrigger", "read", "a streaming read"),
        ("once", "read", "a write"),
        ("consumer", "stream", "a write"),
        ("batchSize", "read", "a write"),
    ],
)
def test_an_option_of_another_use_is_refused(option: str, use: str, belongs: str) -> None:
    with pytest.raises(OptionError, match=f"Option '{option}' is for {belongs}"):
        check_use({"url": "redis://h/0", option.lower(): "x"}, use)


def test_options_of_their_own_use_pass() -> None:
    check_use({"url": "u", "since": "2026-01-01", "queue": "q"}, "read")
    check_use({"url": "u", "failOnDataLoss": "false", "archive": "a"}, "stream")
    check_use({"url": "u", "once": "true", "consumer": "c", "batchSize": "10"}, "write")


def test_kafkas_option_names_point_at_ours() -> None:
    with pytest.raises(
        OptionError, match="Kafka's; the redisq data source's is 'maxRecordsPerTrigger'"
    ):
        check_names({"url": "u", "maxOffsetsPerTrigger": "10"})


@pytest.mark.spark
def test_spark_refuses_an_option_of_another_use_at_the_read(spark: Any, redis_url: str) -> None:
    batch = spark.read.format("redisq").options(url=redis_url, failOnDataLoss="false").load()
    with pytest.raises(Exception, match="Option 'failOnDataLoss' is for a streaming read"):
        batch.count()
