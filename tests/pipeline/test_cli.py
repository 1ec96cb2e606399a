"""The pipeline's command lines: ``python -m redisq_django.pipeline`` (no Django) and
``manage.py redisq_pipeline`` (options from ``settings.REDISQ``)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.management.commands.redisq_pipeline import settings_redis_url
from redisq_django.pipeline.cli import main
from redisq_django.pipeline.options import (
    OptionError,
    normalize_root,
    one_line,
    parse_conf,
    redact_url,
    url_from_connection_kwargs,
)
from tests.pipeline.archive_support import count_and_distinct, publish, read_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "the following arguments are required: JOB"),
        (["vacuum"], "invalid choice: 'vacuum'"),
        (["archive", "--root", "/tmp/a"], "the following arguments are required: --redis-url"),
        (["archive", "--redis-url", "redis://h/0"], "the following arguments are required: --root"),
        (
            ["archive", "--redis-url", "redis://h/0", "--root", "a", "--once", "--trigger", "5"],
            "not allowed with argument --once",
        ),
        (["archive", "--redis-url", "redis://h/0", "--root", "a", "--trigger", "0"], "must be > 0"),
        (["archive", "--redis-url", "redis://h/0", "--root", "a", "--trigger", "soon"], "'soon'"),
        (["archive", "--redis-url", "redis://h/0", "--root", "a", "--conf", "x"], "KEY=VALUE"),
        (["archive", "--redis-url", "http://h/0", "--root", "a"], "redis://, rediss:// or unix://"),
        (["archive", "--redis-url", "redis://h/0", "--root", "a", "--queue", "a b"], "'a b'"),
        (["archive", "--redis-url", "redis://h/0", "--root", "a", "--name", "a:b"], "'a:b'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("python -m redisq_django.pipeline")
    assert says in err
    assert err.rstrip().endswith("(see --help)")


def test_unreachable_redis_fails_in_one_line_before_spark_and_without_django(
    tmp_path: Path,
) -> None:
    check = (
        "import sys\n"
        "from redisq_django.pipeline.cli import main\n"
        "code = main(['archive', '--redis-url', 'redis://:s3cret@127.0.0.1:1/0',\n"
        f"             '--root', {str(tmp_path)!r}, '--once'])\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'Django imported'\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )

    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "failed: cannot reach Redis at redis://:***@127.0.0.1:1/0" in done.stderr
    assert "s3cret" not in done.stderr
    assert not (tmp_path / "_checkpoints").exists()


def test_a_failing_job_is_one_line_and_exit_1(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a queue to archive (with none the job has nothing to start, whatever ran
    # before it on this server)
    Broker(redis_client, CoreConfig()).publish(queue_name, {"n": 1})
    # /proc takes no new directories: Spark cannot create the checkpoint.
    # (only this test's queue: the shared server's others belong to other tests' archives)
    argv = ["--root", "/proc/redisq-archive", "--queue", queue_name]
    code = main(["archive", "--redis-url", redis_url, *argv])

    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(
        "python -m redisq_django.pipeline archive: failed: cannot start the messages query: "
    ), err
    assert "/proc/redisq-archive" in err[-1]  # Java's own message, not py4j's "o87.start"
    assert len(err) == 2  # the line saying what it is about to do, and this one


def test_spark_errors_are_cut_to_the_line_that_says_what_went_wrong() -> None:
    python_worker = RuntimeError(
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
        "source perform initialOffset: Traceback (most recent call last):\n"
        '  File "/x/streaming.py", line 70, in starting_offset\n'
        "    raise OptionError(\n"
        "redisq_django.pipeline.source_options.OptionError: startingOffsets must be ...\n"
        " SQLSTATE: 38000\n"
        "=== Streaming Query ===\n"
    )
    assert one_line(python_worker) == (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
        "source perform initialOffset: OptionError: startingOffsets must be ..."
    )
    java = RuntimeError(
        "An error occurred while calling o87.start.\n: java.io.IOException: mkdir failed\n"
        "\tat org.apache.hadoop.fs.Foo(Foo.java:1)"
    )
    assert one_line(java) == "IOException: mkdir failed"
    assert one_line(ValueError("first\nsecond")) == "first"
    assert one_line(KeyError()) == "KeyError"


# Archives every queue in Redis (the settings name none): this test's must be the only one.
@pytest.mark.usefixtures("empty_redis")
def test_manage_py_archive_once_uses_the_settings(
    spark: SparkSession,
    settings: Any,
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    queue_name: str,
) -> None:
    root = tmp_path / "archive"
    settings.REDISQ = {
        "URL": redis_url,
        "ARCHIVE_ROOT": str(root),
        "HISTORY": True,
        "ARCHIVE_NAME": "nightly",
    }
    ids = publish(Broker(redis_client, CoreConfig()), queue_name, 300)
    out, err = io.StringIO(), io.StringIO()

    call_command("redisq_pipeline", "archive", "--once", stdout=out, stderr=err)

    assert out.getvalue().startswith(f"archived messages=300 events=0 ({queue_name}: 300/0) in ")
    assert f"to {root} as archive 'nightly', once" in err.getvalue()
    assert count_and_distinct(read_table(spark, root, "messages"), "message_id") == (300, 300)
    assert Broker(redis_client, CoreConfig()).archives.positions(queue_name, "nightly") == {
        "messages": ids[-1]
    }
    # Still usable: the command left the shared session running.
    assert spark.range(3).count() == 3


def test_manage_py_archive_needs_a_root(settings: Any, redis_url: str) -> None:
    settings.REDISQ = {"URL": redis_url}

    with pytest.raises(CommandError, match=r"No archive root: set REDISQ\['ARCHIVE_ROOT'\]"):
        call_command("redisq_pipeline", "archive", "--once")


def test_manage_py_says_when_redis_is_unreachable(settings: Any, tmp_path: Path) -> None:
    settings.REDISQ = {"URL": "redis://:pw@127.0.0.1:1/0", "ARCHIVE_ROOT": str(tmp_path)}

    with pytest.raises(CommandError, match=r"cannot reach Redis at redis://:\*\*\*@127") as caught:
        call_command("redisq_pipeline", "archive", "--once")
    assert "pw@" not in str(caught.value)


def test_manage_py_without_the_pipeline_extra_says_how_to_install_it() -> None:
    script = (
        "import sys\n"
        "sys.modules['pyspark'] = None  # as if the pipeline extra were not installed\n"
        "import django\n"
        "django.setup()\n"
        "from django.core.management import CommandError, call_command\n"
        "try:\n"
        "    call_command('redisq_pipeline', 'archive', '--once')\n"
        "except CommandError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert "needs the pipeline extra" in done.stdout, done.stderr
    assert "pip install 'redisq-django[pipeline]'" in done.stdout


def test_the_redis_url_comes_from_the_django_redis_cache(settings: Any, redis_url: str) -> None:
    settings.CACHES = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}
    }
    settings.REDISQ = {"CONNECTION": "default"}

    url = settings_redis_url()

    assert url == redis_url
    assert redis.Redis.from_url(url).ping()


def test_urls_from_connection_kwargs_and_their_redaction() -> None:
    tcp = url_from_connection_kwargs(
        {"host": "db.example", "port": 6380, "db": 2, "username": "app", "password": "p@ss:w"}
    )
    assert tcp == "redis://app:p%40ss%3Aw@db.example:6380/2"
    assert redis.Redis.from_url(tcp).connection_pool.connection_kwargs["password"] == "p@ss:w"
    assert redact_url(tcp) == "redis://app:***@db.example:6380/2"
    assert url_from_connection_kwargs({"path": "/run/redis.sock", "db": 1}) == (
        "unix:///run/redis.sock?db=1"
    )
    assert url_from_connection_kwargs({"host": "::1", "port": 6379}, ssl=True) == (
        "rediss://[::1]:6379/0"
    )
    assert redact_url("redis://localhost:6379/0") == "redis://localhost:6379/0"


def test_conf_and_root_parsing() -> None:
    assert parse_conf(["a=1", "b=x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(OptionError, match="KEY=VALUE"):
        parse_conf(["=1"])
    assert normalize_root("hdfs://nn/archive/") == "hdfs://nn/archive"
    assert normalize_root("rel/dir") == str(Path.cwd() / "rel" / "dir")


@pytest.mark.parametrize(
    ("make", "says"), [(False, "is not a directory"), (True, "holds no archive")]
)
def test_report_refuses_a_root_that_holds_no_archive(
    tmp_path: Path, make: bool, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A nightly report with a typo in its path must fail, not report "0 published"
    root = tmp_path / "archvie"
    if make:
        (root / "messages").mkdir(parents=True)  # a directory, but nothing committed
    with pytest.raises(SystemExit) as exited:
        main(["report", "--root", str(root)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and str(root) in err
    assert not (root / "reports").exists()
