"""The ``report``, ``replay``, ``compact`` and ``files`` sub-commands: their arguments
(shared by ``python -m redisq_django.pipeline`` and ``manage.py redisq_pipeline``), the
options they build, and running them. Imports neither PySpark (until a job runs) nor
Django.
"""

from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlsplit

from redisq_django.arguments import positive_float, positive_int
from redisq_django.pipeline.files import LOG_DIR, TABLES, archive_files, write_manifests
from redisq_django.pipeline.job_options import (
    DEFAULT_TARGET_FILE_BYTES,
    CompactOptions,
    ReplayOptions,
    parse_time,
)
from redisq_django.pipeline.options import (
    OptionError,
    conf_argument,
    normalize_root,
    one_line,
    parse_conf,
)
from redisq_django.pipeline.quiet import set_log_level

_LOG_LEVELS = ["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"]


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """``--master``, ``--conf k=v`` (repeatable) and ``--spark-log-level``."""
    parser.add_argument("--master", metavar="M", help="Spark master URL (default local[*])")
    parser.add_argument(
        "--conf",
        action="append",
        type=conf_argument,
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration (repeatable)",
    )
    parser.add_argument(
        "--spark-log-level",
        default="ERROR",
        choices=_LOG_LEVELS,
        help="Spark's log level once the session is up (default ERROR: without the "
        "stack traces of a failing task, which the job reports in one line; WARN shows them)",
    )


def add_root(parser: argparse.ArgumentParser, from_settings: bool) -> None:
    """``--root`` (required unless the management command fills it from the settings)."""
    parser.add_argument(
        "--root",
        required=not from_settings,
        metavar="ROOT",
        help="the archive (directory or Hadoop URI)"
        + (" (default REDISQ['ARCHIVE_ROOT'])" if from_settings else ""),
    )


def add_report_arguments(parser: argparse.ArgumentParser, *, from_settings: bool) -> None:
    """The ``report`` job's arguments, shared with ``manage.py redisq_pipeline``
    (``from_settings``: ``--root`` defaults to ``REDISQ['ARCHIVE_ROOT']``)."""
    add_root(parser, from_settings)
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="local directory for the Parquet aggregates and report.html "
        "(default ROOT/reports/<UTC time>, then ROOT/reports/latest points at it)",
    )
    parser.add_argument("--since", metavar="T", help="ISO date or time, UTC (default: 7 days ago)")
    parser.add_argument("--until", metavar="T", help="ISO date (its end) or time (default: now)")
    parser.add_argument(
        "--queue",
        dest="queues",
        action="extend",
        nargs="+",
        default=[],
        metavar="Q",
        help="queue(s) to report on (repeatable; default: every queue in the archive)",
    )
    parser.add_argument(
        "--bucket",
        choices=("minute", "hour"),
        help="the charts' step (default: minutes when the range's data spans 6 hours or "
        "less, else hours)",
    )
    add_spark_arguments(parser)


def _check_archive_root(root: str) -> None:
    """Refuse a local ``root`` that holds no committed archive (a typo in a nightly job's
    path must fail, not report "0 published" or list nothing, and stay green). Other
    file systems are read with their own credentials: checked there.

    Raises:
        OptionError: ``root`` is not a directory, or no archive committed anything there.
    """
    local = root if len(urlsplit(root).scheme) <= 1 else None
    if urlsplit(root).scheme == "file":
        local = urlsplit(root).path
    if local is None:
        return
    if not os.path.isdir(local):
        raise OptionError(
            f"--root {root} is not a directory: give the archive's root (ROOT of "
            "'archive --root ROOT')"
        )
    if not any(_holds_data(local, table) for table in TABLES):
        parent, name = os.path.split(local.rstrip("/"))
        if name in TABLES and any(_holds_data(parent, table) for table in TABLES):
            raise OptionError(
                f"--root {root} is the archive's {name} table: give the archive's root, {parent}"
            )
        raise OptionError(
            f"--root {root} holds no archive: no committed messages or events under it "
            "(ROOT/messages, ROOT/events). Give the archive's root, or run the archive job first"
        )


def _holds_data(root: str, table: str) -> bool:
    """Whether local ``root/table`` holds data a reader would use: the committed files
    when the archive's sink log is there, else any Parquet file (a table written by
    other means, which Spark reads whole)."""
    if os.path.isdir(os.path.join(root, table, LOG_DIR)):
        return bool(archive_files(root, table))
    for _, _, names in os.walk(os.path.join(root, table)):
        if any(n.endswith(".parquet") for n in names):
            return True
    return False


def run_report(args: argparse.Namespace) -> str:
    """Build the report options from parsed arguments, run the job, return its summary
    line (ending with the path of report.html).

    Raises:
        OptionError: an option is invalid (before any JVM starts).
    """
    from redisq_django.pipeline.report import ReportOptions, report
    from redisq_django.pipeline.session import pipeline_session

    root = normalize_root(args.root)
    _check_archive_root(root)
    options = ReportOptions(
        root=root,
        out=args.out,
        since=parse_time(args.since, "--since") if args.since else None,
        until=parse_time(args.until, "--until", end=True) if args.until else None,
        queues=tuple(dict.fromkeys(q for item in args.queues for q in item.split(",") if q)),
        bucket=args.bucket,
    )
    with pipeline_session(args.master, parse_conf(args.conf), data_source=False) as spark:
        set_log_level(spark, args.spark_log_level)
        return report(spark, options).line()


def add_replay_arguments(parser: argparse.ArgumentParser, *, from_settings: bool) -> None:
    """The ``replay`` job's arguments (``from_settings``: the management command, where
    the Redis URL and prefix come from ``settings.REDISQ``)."""
    if not from_settings:
        parser.add_argument("--redis-url", required=True, metavar="URL", help="target Redis")
        parser.add_argument("--prefix", default="redisq", help="key prefix (default redisq)")
        parser.add_argument("--cluster", action="store_true", help="the URL is a Cluster node")
    add_root(parser, from_settings)
    parser.add_argument("--queue", required=True, metavar="Q", help="the queue to replay")
    parser.add_argument(
        "--since", metavar="T", help="first published_at replayed: ISO date or time, UTC"
    )
    parser.add_argument(
        "--until",
        metavar="T",
        help="end of the range: ISO time (exclusive) or date (its end), UTC",
    )
    parser.add_argument(
        "--where",
        metavar="SQL",
        help="Spark SQL predicate on the messages table, e.g. "
        "\"try_cast(get_json_object(payload, '$.total') AS DECIMAL(12,2)) > 1000\" "
        "(JSON values are text: cast them, with try_cast, before comparing)",
    )
    parser.add_argument(
        "--consumer", metavar="C", help="deliver to this logical consumer only (default: all)"
    )
    parser.add_argument(
        "--ordered",
        action="store_true",
        help="one global publish order (one task: slower); default: in order per task",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="count and show a sample, publish nothing"
    )
    parser.add_argument(
        "--rate",
        type=positive_float,
        metavar="N",
        help="at most N messages/s, all tasks together",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="replay ids derived from this replay's options: running it again is a no-op",
    )
    add_spark_arguments(parser)


def add_compact_arguments(parser: argparse.ArgumentParser, *, from_settings: bool) -> None:
    """The ``compact`` job's arguments (``from_settings``: ``--root`` defaults to
    ``REDISQ['ARCHIVE_ROOT']``)."""
    add_root(parser, from_settings)
    parser.add_argument("--since", metavar="D", help="first date compacted (ISO date, UTC)")
    parser.add_argument(
        "--until",
        metavar="D",
        help="last date compacted (ISO date, UTC; default and latest: yesterday)",
    )
    parser.add_argument(
        "--target-file-mb",
        type=positive_int,
        default=DEFAULT_TARGET_FILE_BYTES // (1024 * 1024),
        metavar="MB",
        help="size a compacted file aims at (default 128)",
    )
    add_spark_arguments(parser)


def add_files_arguments(parser: argparse.ArgumentParser, *, from_settings: bool) -> None:
    """The ``files`` job's arguments (``from_settings``: ``--root`` defaults to
    ``REDISQ['ARCHIVE_ROOT']``)."""
    add_root(parser, from_settings)
    parser.add_argument(
        "--table",
        choices=TABLES,
        default="messages",
        help="the table whose files are listed (default messages)",
    )
    parser.add_argument(
        "--manifest",
        metavar="DIR",
        help="instead of listing, write Hive symlink manifests of both tables under DIR "
        "(DIR/<table>/queue=Q/date=D/manifest) for Trino, Presto or Athena",
    )


def run_files(args: argparse.Namespace) -> str:
    """The committed Parquet files of ``--table``, one per line, or with ``--manifest``
    a line saying what the manifests name. Needs no Spark."""
    root = normalize_root(args.root)
    _check_archive_root(root)
    if args.manifest:
        named = write_manifests(root, normalize_root(args.manifest))
        counts = ", ".join(f"{table} {n}" for table, n in named.items())
        return f"manifests of the committed files ({counts}) written to {args.manifest}"
    return "\n".join(archive_files(root, args.table))


def replay_options(args: argparse.Namespace, *, redis_url: str, prefix: str) -> ReplayOptions:
    """The replay options from parsed arguments.

    Raises:
        OptionError: an option is invalid.
    """
    return ReplayOptions(
        redis_url=redis_url,
        root=normalize_root(args.root),
        queue=args.queue,
        prefix=prefix,
        cluster=getattr(args, "cluster", False),
        since=parse_time(args.since, "--since") if args.since else None,
        until=parse_time(args.until, "--until", end=True) if args.until else None,
        where=args.where,
        consumer=args.consumer,
        ordered=args.ordered,
        dry_run=args.dry_run,
        rate=args.rate,
        once=args.once,
    )


def compact_options(args: argparse.Namespace) -> CompactOptions:
    """The compaction options from parsed arguments.

    Raises:
        OptionError: an option is invalid.
    """
    return CompactOptions(
        root=normalize_root(args.root),
        since=parse_time(args.since, "--since").date() if args.since else None,
        until=parse_time(args.until, "--until").date() if args.until else None,
        target_file_bytes=int(args.target_file_mb) * 1024 * 1024,
    )


def run_replay(options: ReplayOptions, args: argparse.Namespace) -> str:
    """Run the replay job in a pipeline session; its summary line (a dry run's sample
    goes to stderr)."""
    from redisq_django.pipeline.replay import replay
    from redisq_django.pipeline.session import pipeline_session

    with pipeline_session(args.master, parse_conf(args.conf), data_source=False) as spark:
        set_log_level(spark, args.spark_log_level)
        summary = replay(spark, options)
    for row in summary.sample:
        print(f"  {row['published_at']} {row['message_id']} {row['payload']}", file=sys.stderr)
    return summary.line()


def run_compact(options: CompactOptions, args: argparse.Namespace) -> str:
    """Run the compaction in a pipeline session; its summary line."""
    from redisq_django.pipeline.compact import compact
    from redisq_django.pipeline.session import pipeline_session

    with pipeline_session(args.master, parse_conf(args.conf), data_source=False) as spark:
        set_log_level(spark, args.spark_log_level)
        return compact(spark, options).line()


def job_main(prog: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``report``, ``replay``, ``compact`` or ``files`` from parsed CLI arguments;
    the exit status (0 done, 1 failed, 2 bad arguments, 130 interrupted)."""
    try:
        if args.job == "files":
            line = run_files(args)
        elif args.job == "report":
            line = run_report(args)
        elif args.job == "replay":
            replay = replay_options(args, redis_url=args.redis_url, prefix=args.prefix)
            print(replay.describe(), file=sys.stderr, flush=True)
            line = run_replay(replay, args)
        else:
            line = run_compact(compact_options(args), args)
    except OptionError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print(f"{prog} {args.job}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the job's JobError, or Spark failing to start
        print(f"{prog} {args.job}: failed: {one_line(exc)}", file=sys.stderr)
        return 1
    if line:
        print(line, flush=True)
    return 0
