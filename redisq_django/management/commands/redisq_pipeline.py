"""``manage.py redisq_pipeline JOB``: the Spark pipeline jobs with options from settings.

The same jobs as ``python -m redisq_django.pipeline``; the Redis URL, the key prefix and
the archive root come from ``settings.REDISQ`` (``URL`` or the django-redis cache of
``CONNECTION``; ``PREFIX``; ``ARCHIVE_ROOT``). Needs the ``pipeline`` extra
(``pip install 'redisq-django[pipeline]'``) and Java 17+.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from redisq_django.arguments import django_common_options
from redisq_django.conf import get_settings
from redisq_django.connection import get_redis_client
from redisq_django.core.errors import RedisqError

try:
    # The pipeline package imports PySpark only when a job runs: look for it here, so
    # that a missing extra is reported as such (MISSING) rather than as a failed job.
    if importlib.util.find_spec("pyspark") is None:
        raise ImportError("No module named 'pyspark'", name="pyspark")

    from redisq_django.pipeline.cli import (
        add_archive_arguments,
        archive_options,
        describe,
        preflight,
        run_archive,
    )
    from redisq_django.pipeline.cli_jobs import (
        add_compact_arguments,
        add_files_arguments,
        add_replay_arguments,
        add_report_arguments,
        compact_options,
        replay_options,
        run_compact,
        run_files,
        run_replay,
        run_report,
    )
    from redisq_django.pipeline.options import (
        OptionError,
        one_line,
        parse_conf,
        url_from_connection_kwargs,
    )
except ImportError as exc:  # no pipeline extra: say so when the command runs, not before
    MISSING: str | None = (
        f"manage.py redisq_pipeline needs the pipeline extra ({exc}): "
        "pip install 'redisq-django[pipeline]' (and Java 17+ for Spark)."
    )
else:
    MISSING = None


def settings_redis_url() -> str:
    """The Redis URL of ``settings.REDISQ``: ``URL``, else the URL of the django-redis
    client of ``CONNECTION`` (the executors need a URL, not a client).

    Raises:
        CommandError: the client is not one a URL can describe (e.g. a cluster client).
    """
    settings = get_settings()
    if settings["URL"]:
        return str(settings["URL"])
    try:
        client = get_redis_client()
    except RedisqError as exc:
        raise CommandError(str(exc)) from None
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise CommandError(
            f"Cannot build a Redis URL from the {type(client).__name__} client of "
            f"REDISQ['CONNECTION'] = {settings['CONNECTION']!r}; set REDISQ['URL']."
        )
    ssl = "SSL" in getattr(pool, "connection_class", type(None)).__name__
    return url_from_connection_kwargs(pool.connection_kwargs, ssl=ssl)


class Command(BaseCommand):
    help = (
        "Run a Spark pipeline job over the message history with the Redis and archive "
        "settings of settings.REDISQ. Jobs: archive, report, replay, compact, files."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if MISSING:
            parser.add_argument("args", nargs=argparse.REMAINDER)
            return
        jobs = parser.add_subparsers(dest="job", required=True, metavar="JOB")
        common = [django_common_options()]  # --settings etc. after the job too
        archive = jobs.add_parser(
            "archive",
            parents=common,
            help="messages and lifecycle events to Parquet under REDISQ['ARCHIVE_ROOT']",
        )
        add_archive_arguments(archive, from_settings=True)
        report = jobs.add_parser(
            "report",
            parents=common,
            help="aggregates of a time range (Parquet) and report.html under "
            "REDISQ['ARCHIVE_ROOT']/reports",
        )
        add_report_arguments(report, from_settings=True)
        replay = jobs.add_parser(
            "replay",
            parents=common,
            help="archived messages (time range, SQL predicate) back to a queue or one "
            "consumer of REDISQ's Redis",
        )
        add_replay_arguments(replay, from_settings=True)
        compact = jobs.add_parser(
            "compact",
            parents=common,
            help="old date partitions of the archive into fewer, larger files",
        )
        add_compact_arguments(compact, from_settings=True)
        files = jobs.add_parser(
            "files",
            parents=common,
            help="the archive's committed Parquet files (or Hive symlink manifests of "
            "them), for engines other than Spark",
        )
        add_files_arguments(files, from_settings=True)

    def _report(self, namespace: argparse.Namespace) -> str:
        """Run the report job (no Redis needed: it reads the archive); its summary line."""
        try:
            return run_report(namespace)
        except OptionError as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # the job's JobError, or Spark failing
            raise CommandError(f"report failed: {one_line(exc)}") from None

    def _replay_or_compact(self, namespace: argparse.Namespace) -> str:
        """Run the replay (to REDISQ's Redis) or compact job; its summary line."""
        try:
            if namespace.job == "compact":
                return run_compact(compact_options(namespace), namespace)
            options = replay_options(
                namespace, redis_url=settings_redis_url(), prefix=get_settings()["PREFIX"]
            )
            self.stderr.write(options.describe())
            return run_replay(options, namespace)
        except OptionError as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # the job's JobError, or Spark failing
            raise CommandError(f"{namespace.job} failed: {one_line(exc)}") from None

    def handle(self, *args: Any, **opts: Any) -> None:
        if MISSING:
            raise CommandError(MISSING)
        settings = get_settings()
        root = opts["root"] or settings.get("ARCHIVE_ROOT")
        if not root:
            raise CommandError(
                "No archive root: set REDISQ['ARCHIVE_ROOT'] (a directory or a Hadoop URI) "
                "or pass --root."
            )
        namespace = argparse.Namespace(**{**opts, "root": str(root)})
        if opts["job"] == "report":
            self.stdout.write(self._report(namespace))
            return
        if opts["job"] == "files":
            try:
                listing = run_files(namespace)
            except Exception as exc:  # ArchiveLogError, OSError: one line
                raise CommandError(f"files failed: {one_line(exc)}") from None
            if listing:
                self.stdout.write(listing)
            return
        if opts["job"] in ("replay", "compact"):
            self.stdout.write(self._replay_or_compact(namespace))
            return
        try:
            options = archive_options(
                namespace,
                redis_url=settings_redis_url(),
                prefix=settings["PREFIX"],
                name=settings["ARCHIVE_NAME"],
            )
            conf = parse_conf(opts["conf"])
        except OptionError as exc:
            raise CommandError(str(exc)) from None
        if not settings.get("HISTORY"):
            self.stderr.write(
                "REDISQ['HISTORY'] is off: workers write no lifecycle events, so only "
                "messages are archived."
            )
        try:
            preflight(options)
            self.stderr.write(describe(options))
            line = run_archive(
                options, master=opts["master"], conf=conf, log_level=opts["spark_log_level"]
            )
        except Exception as exc:  # the job's ArchiveError, or Spark failing to start
            raise CommandError(f"archive failed: {one_line(exc)}") from None
        self.stdout.write(line)
