"""The command line of the pipeline jobs: ``python -m redisq_django.pipeline JOB ...``.

It parses the arguments, builds the SparkSession and calls the job function; it imports
no Django (the Redis URL and the archive root are arguments). Exit status: 0 done (also
stopped by SIGTERM/SIGINT, Spark's JVM with it or not: ``pipeline/jvm.py``), 1 the job
failed (one line on stderr says why), 2 bad arguments (one line too), 130 interrupted
before the job could stop by itself.

The JVM starts only once the arguments are valid and Redis answers, so ``--help``,
mistakes and a wrong URL are answered at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from redisq_django.arguments import non_negative_int, positive_float, positive_int
from redisq_django.core.archives import DEFAULT_ARCHIVE
from redisq_django.pipeline.cli_jobs import (
    add_compact_arguments,
    add_files_arguments,
    add_replay_arguments,
    add_report_arguments,
    job_main,
)
from redisq_django.pipeline.options import (
    ArchiveOptions,
    OptionError,
    conf_argument,
    normalize_root,
    one_line,
    parse_conf,
    redact_url,
)
from redisq_django.pipeline.restarts import DEFAULT_RESTART_BUDGET_S, DEFAULT_RESTARTS

PROG = "python -m redisq_django.pipeline"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage dump) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def add_archive_arguments(parser: argparse.ArgumentParser, *, from_settings: bool) -> None:
    """The ``archive`` job's arguments, shared with ``manage.py redisq_pipeline``.

    Args:
        parser: the (sub)parser to add them to.
        from_settings: True for the management command, where the Redis URL and prefix
            come from ``settings.REDISQ`` and ``--root`` defaults to ``ARCHIVE_ROOT``.
    """
    if not from_settings:
        parser.add_argument(
            "--redis-url",
            required=True,
            metavar="URL",
            help="redis://, rediss:// or unix:// URL of the queues' Redis",
        )
        parser.add_argument(
            "--prefix", default="redisq", help="key prefix of the queues (default redisq)"
        )
        parser.add_argument(
            "--cluster", action="store_true", help="the URL names a Redis Cluster node"
        )
    parser.add_argument(
        "--root",
        required=not from_settings,
        metavar="ROOT",
        help="archive directory or Hadoop URI"
        + (" (default REDISQ['ARCHIVE_ROOT'])" if from_settings else ""),
    )
    parser.add_argument(
        "--queue",
        dest="queues",
        action="extend",
        nargs="+",
        default=[],
        metavar="Q",
        help="queue(s) to archive (repeatable; default: every queue)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--once",
        action="store_true",
        help="archive what is there now, then exit (the default)",
    )
    mode.add_argument(
        "--trigger",
        type=positive_float,
        metavar="SECONDS",
        help="keep running: a micro-batch every SECONDS until SIGTERM/SIGINT",
    )
    parser.add_argument(
        "--name",
        metavar="NAME",
        default=None if from_settings else DEFAULT_ARCHIVE,
        help="the archive's name: it registers under it and retention waits for it "
        + (
            "(default REDISQ['ARCHIVE_NAME'], else default)"
            if from_settings
            else "(default default)"
        ),
    )
    parser.add_argument(
        "--take-over",
        action="store_true",
        help="take the archive's name over from the archive that owns it (another "
        "checkpoint: its job stops at its next commit). Without it, a job whose checkpoint "
        "does not own the name is refused: give a job that replaces one whose checkpoint "
        "was lost or moved --take-over once",
    )
    parser.add_argument(
        "--fail-on-data-loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop with exit status 1 when entries were removed before the archive stored "
        "them (a hard cap, a purge); --no-fail-on-data-loss goes on and records them in ROOT/_gaps "
        "(the report shows them). Default: stop",
    )
    parser.add_argument(
        "--restarts",
        type=non_negative_int,
        default=DEFAULT_RESTARTS,
        metavar="N",
        help="times in a row a query that failed for a reason outside the data (a Python "
        "worker killed or too slow to start, a task Spark lost) starts again from its "
        "checkpoint, after a pause of 5, 10, 20, 40, then 60 s, before the job fails "
        f"(default {DEFAULT_RESTARTS}; 0: never). Data loss and a Redis outage longer than "
        "the source's retryTimeout are never retried",
    )
    parser.add_argument(
        "--restart-budget",
        type=positive_float,
        default=DEFAULT_RESTART_BUDGET_S,
        metavar="SECONDS",
        help="how long a query's restarts in a row may go on, from the failure that began "
        f"them, before the job fails (default {DEFAULT_RESTART_BUDGET_S:g})",
    )
    parser.add_argument(
        "--max-entries-per-trigger",
        type=positive_int,
        metavar="N",
        help="most entries one micro-batch reads, all queues together (default: all)",
    )
    parser.add_argument(
        "--max-records-per-trigger",
        type=positive_int,
        metavar="N",
        help="most rows one micro-batch reads, all queues together; an events entry is a "
        "row per message it settled (default: all)",
    )
    parser.add_argument(
        "--grace-period",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, time a running micro-batch gets to finish (default 30)",
    )
    parser.add_argument(
        "--master",
        metavar="M",
        help="Spark master URL (default: spark-submit's, else local[*])",
    )
    parser.add_argument(
        "--conf",
        action="append",
        type=conf_argument,
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration (repeatable), e.g. --conf spark.sql.shuffle.partitions=8",
    )
    parser.add_argument(
        "--spark-log-level",
        default="ERROR",
        choices=["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
        help="Spark's log level once the session is up (default ERROR)",
    )


def archive_options(
    args: argparse.Namespace, *, redis_url: str, prefix: str, name: str | None = None
) -> ArchiveOptions:
    """The job options from parsed ``archive`` arguments (``name``: the archive's name
    when ``--name`` is not given).

    Raises:
        OptionError: an option is invalid.
    """
    return ArchiveOptions(
        redis_url=redis_url,
        root=normalize_root(args.root),
        prefix=prefix,
        queues=tuple(dict.fromkeys(q for item in args.queues for q in item.split(",") if q)),
        trigger_seconds=args.trigger,
        cluster=getattr(args, "cluster", False),
        max_entries_per_trigger=args.max_entries_per_trigger,
        max_records_per_trigger=args.max_records_per_trigger,
        grace_seconds=args.grace_period,
        name=args.name or name or DEFAULT_ARCHIVE,
        take_over=args.take_over,
        fail_on_data_loss=args.fail_on_data_loss,
        restarts=args.restarts,
        restart_budget_seconds=args.restart_budget,
    )


def describe(options: ArchiveOptions) -> str:
    """One line saying what the archive run will do (never the Redis password)."""
    queues = ", ".join(options.queues) if options.queues else "every queue"
    mode = "once" if options.once else f"every {options.trigger_seconds:g} s until stopped"
    return (
        f"archiving {queues} from {redact_url(options.redis_url)} (prefix {options.prefix!r}) "
        f"to {options.root} as archive {options.name!r}, {mode}"
    )


def preflight(options: ArchiveOptions) -> None:
    """Check, before a JVM starts, that Redis answers at the URL given.

    Raises:
        JobError: it does not; the message says so in one line.
    """
    from redisq_django.pipeline.preflight import queues_to_archive

    queues_to_archive(options)


def run_archive(
    options: ArchiveOptions, *, master: str | None, conf: dict[str, str], log_level: str
) -> str:
    """Build the session, run the archive job, return its summary line (or the line that
    says it stopped when a signal stopped Spark's JVM too: see ``pipeline/jvm.py``).

    Raises:
        ArchiveError: the job failed.
    """
    from redisq_django.pipeline import jvm
    from redisq_django.pipeline.archive import archive
    from redisq_django.pipeline.quiet import set_log_level
    from redisq_django.pipeline.session import pipeline_session

    with pipeline_session(master, conf) as spark:
        # Without the stack traces that only repeat a failure the job reports in a line
        set_log_level(spark, log_level)
        try:
            summary = archive(spark, options)
        except Exception as exc:
            # A service manager signalled every process of the job, Spark's JVM too: a
            # stop, not a failure (the unfinished micro-batch is done again next run).
            signal_name = jvm.stop_signal(exc)
            if signal_name is None:
                raise
            return (
                f"stopped: Spark's JVM got {signal_name} as well, so the micro-batch under "
                "way was abandoned; what earlier ones archived stays, and the next run "
                "continues from there"
            )
    for note in summary.notes:
        print(note, file=sys.stderr, flush=True)
    return summary.line()


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m redisq_django.pipeline``."""
    parser = OneLineParser(
        prog=PROG,
        description="Spark jobs over the redisq message history.",
    )
    jobs = parser.add_subparsers(dest="job", required=True, metavar="JOB")
    archive_parser = jobs.add_parser(
        "archive",
        help="messages and lifecycle events to Parquet, exactly once",
        description="Archive the queues' messages and lifecycle events to Parquet under "
        "ROOT (in directories by queue and UTC date), exactly once.",
    )
    add_archive_arguments(archive_parser, from_settings=False)
    report_parser = jobs.add_parser(
        "report",
        help="aggregates of a time range to Parquet and one self-contained HTML page",
        description="Report per queue, consumer and hour (minute for ranges up to 6 h) "
        "from the archive under ROOT: Parquet aggregates and report.html.",
    )
    add_report_arguments(report_parser, from_settings=False)

    replay_parser = jobs.add_parser(
        "replay",
        help="archived messages (time range, SQL predicate) back to a queue or one consumer",
        description="Publish archived messages of a queue again, selected by time range and "
        "a Spark SQL predicate, to the queue or to one logical consumer.",
    )
    add_replay_arguments(replay_parser, from_settings=False)
    compact_parser = jobs.add_parser(
        "compact",
        help="rewrite the archive's old day directories into fewer, larger files",
        description="Compact the archive's directories of days before today (UTC) into "
        "fewer Parquet files, de-duplicated; Spark readers see each row once throughout. "
        "Files of micro-batches that never committed (a job killed mid-batch) are removed.",
    )
    add_compact_arguments(compact_parser, from_settings=False)
    files_parser = jobs.add_parser(
        "files",
        help="the archive's committed Parquet files, for engines other than Spark",
        description="List the Parquet files of ROOT/<table> that the archive committed "
        "(what Spark reads; a plain glob also finds files of batches that never "
        "committed), or write Hive symlink manifests of them. Starts no Spark.",
    )
    add_files_arguments(files_parser, from_settings=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job in ("report", "replay", "compact", "files"):
        return job_main(PROG, args, parser)
    try:
        options = archive_options(args, redis_url=args.redis_url, prefix=args.prefix)
    except OptionError as exc:
        parser.error(str(exc))
    conf = parse_conf(args.conf)
    try:
        preflight(options)
        print(describe(options), file=sys.stderr, flush=True)
        line = run_archive(options, master=args.master, conf=conf, log_level=args.spark_log_level)
    except KeyboardInterrupt:
        print(f"{PROG} {args.job}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the job's ArchiveError, or Spark failing to start
        print(f"{PROG} {args.job}: failed: {one_line(exc)}", file=sys.stderr)
        return 1
    print(line, flush=True)
    return 0
