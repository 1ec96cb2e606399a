"""``manage.py runconsumer QUEUE [QUEUE ...]``: run the consumers of queues."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from redisq_django.arguments import configure_logging
from redisq_django.conf import get_core_config, get_settings
from redisq_django.connection import get_broker
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.core import bounds
from redisq_django.core.clock import now_ms
from redisq_django.core.errors import RedisqError
from redisq_django.core.worker import COLD_SIGNAL, Supervisor, Worker, WorkerOptions, is_supervised
from redisq_django.metrics.exporter import DEFAULT_HOST, MULTIPROC_ENV, MetricsServer
from redisq_django.models import TUNABLES, Consumer
from redisq_django.runner import build_worker, select
from redisq_django.schedules import listing

logger = logging.getLogger("redisq.worker")


class Command(BaseCommand):
    help = (
        "Run the consumers declared (@consumer) for the given queues until stopped. "
        "SIGTERM/SIGINT: finish in-flight messages, then exit; a second signal exits now."
    )
    #: Options a supervised child gets as they were given (dest, flag).
    CHILD_OPTIONS = (
        ("concurrency", "--concurrency"),
        ("max_messages", "--max-messages"),
        ("prefetch", "--prefetch"),
        ("grace_period", "--grace-period"),
        ("stats_interval", "--stats-interval"),
        ("verbosity", "--verbosity"),
        ("metrics_port", "--metrics-port"),
        ("metrics_host", "--metrics-host"),
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "queues",
            nargs="*",
            metavar="QUEUE",
            help="queues to consume (with --tasks: Django task queues; default all)",
        )
        parser.add_argument(
            "--tasks",
            action="store_true",
            help="run the Django tasks of the TASKS backends that use redisq (every task "
            "queue, or the task queues named)",
        )
        parser.add_argument(
            "--consumer",
            action="append",
            default=[],
            metavar="NAME",
            help="run only this logical consumer (repeatable)",
        )
        parser.add_argument(
            "--concurrency",
            type=bounds.argument("concurrency"),
            help="handler threads per consumer; for an async def consumer, its handlers in "
            "flight on the process's event loop (wins over code and admin)",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="handle what is there (incl. retries), then exit 0",
        )
        parser.add_argument(
            "--max-messages",
            type=bounds.argument("max_messages"),
            help="exit after handling this many messages",
        )
        parser.add_argument(
            "--prefetch",
            type=bounds.argument("prefetch"),
            default=WorkerOptions.prefetch,
            help="most messages fetched per round trip by each thread; batches adapt "
            f"between 1 and this to the handlers' speed (default {WorkerOptions.prefetch})",
        )
        parser.add_argument(
            "--grace-period",
            type=bounds.argument("grace_period"),
            help="seconds in-flight handlers get after SIGTERM "
            "(default REDISQ['SHUTDOWN_GRACE_PERIOD'])",
        )
        parser.add_argument(
            "--stats-interval",
            type=bounds.argument("stats_interval"),
            default=30.0,
            help="seconds between summary lines (0: none; default 30)",
        )
        parser.add_argument(
            "--batch-ack",
            action="store_true",
            help="acknowledge once per batch, not as each handler returns: faster for "
            "tiny handlers, but a crash repeats the whole batch and counts a delivery for "
            "each of its messages",
        )
        parser.add_argument(
            "--fixed-threads",
            action="store_true",
            help="keep every one of a consumer's --concurrency threads fetching; by "
            "default the threads past the first fetch only while handlers wait (I/O) and "
            "the process has CPU to spare, so threads cost nothing for handlers that do not",
        )
        parser.add_argument(
            "--processes",
            type=bounds.argument("processes"),
            default=1,
            help="run N worker processes (each with its threads) under a supervisor that "
            "restarts any that die and forwards SIGTERM/SIGINT to them (default 1: this "
            "process is the worker)",
        )
        parser.add_argument(
            "--metrics-port",
            type=bounds.argument("metrics_port"),
            metavar="PORT",
            help="serve Prometheus metrics (messages handled, failed, retried, dead, "
            "reclaimed; handler duration; latency) on this port at /metrics (0: any free "
            "port, printed at start); with --processes N the supervisor serves the sum "
            "of its processes (needs the metrics extra)",
        )
        parser.add_argument(
            "--metrics-host",
            metavar="HOST",
            help=f"address the metrics endpoint listens on (default {DEFAULT_HOST}, this "
            "host only; 0.0.0.0 for every interface)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        configure_logging(opts["verbosity"], with_pid=opts["processes"] > 1 or is_supervised())
        try:
            # In the words of manage.py check (E001, E005), also with --skip-checks.
            get_settings()
            broker = get_broker()
        except RedisqError as exc:  # SettingsError; MissingExtra (TRACING)
            raise CommandError(str(exc)) from None
        if opts["tasks"]:
            opts["queues"] = _task_queues(opts["queues"])
        elif not opts["queues"]:
            raise CommandError("Name at least one QUEUE to consume (or use --tasks).")
        try:
            broker.operator.ping()
        except Exception as exc:  # RedisUnavailable or a redis-py connection error
            raise CommandError(f"Cannot reach Redis at {broker.where}: {exc}") from None
        grace = opts["grace_period"]
        if grace is None:
            grace = get_settings()["SHUTDOWN_GRACE_PERIOD"]
        if opts["processes"] > 1:
            self._supervise(opts, grace)
            return
        options = WorkerOptions(
            prefetch=opts["prefetch"],
            burst=opts["burst"],
            max_messages=opts["max_messages"],
            grace_period=grace,
            stats_interval=opts["stats_interval"],
            batch_ack=opts["batch_ack"],
            elastic_threads=not opts["fixed_threads"],
        )
        metrics = opts["metrics_port"] is not None
        try:
            worker = build_worker(
                opts["queues"],
                opts["consumer"],
                concurrency=opts["concurrency"],
                options=options,
                metrics=metrics,
            )
            # A supervised child only counts (into the supervisor's multiprocess
            # directory); the supervisor serves.
            server = _serve(opts, supervisor=False) if metrics and not is_supervised() else None
        except RedisqError as exc:
            raise CommandError(str(exc)) from None
        if not is_supervised():  # its supervisor warned already
            get_broker().operator.warn_server_problems()  # eviction, no AOF, Redis < 6.2
        self._banner(worker, opts)
        if server is not None:
            self.stdout.write(f"  metrics: {server.url}")
            self.stdout.flush()
        self._install_signals(worker, grace)
        try:
            code = worker.run()
        except RedisqError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if server is not None:
                server.close()
        if worker.cold:
            sys.stderr.flush()
            os._exit(code)  # handler threads may still run: leave without waiting
        if code:
            sys.exit(code)

    def _supervise(self, opts: dict[str, Any], grace: float) -> None:
        try:
            select(opts["queues"], opts["consumer"])  # one clear line now, not N later
            sync_declarations()  # once here, so the children start without writing rows
        except RedisqError as exc:
            raise CommandError(str(exc)) from None
        finally:
            close_old_connections()
        get_broker().operator.warn_server_problems()  # once for all children
        env = _child_env()
        server = on_exit = None
        if opts["metrics_port"] is not None:
            try:
                server = _serve(opts, supervisor=True)
            except RedisqError as exc:
                raise CommandError(str(exc)) from None
            assert server.directory is not None
            env[MULTIPROC_ENV] = directory = server.directory

            def on_exit(pid: int) -> None:
                from redisq_django.metrics.exporter import child_exited

                child_exited(directory, pid)

        supervisor = Supervisor(
            self._child_argv(opts),
            opts["processes"],
            grace_period=grace,
            env=env,
            on_exit=on_exit,
        )
        self.stdout.write(
            f"redisq supervisor {socket.gethostname()}:{os.getpid()}: "
            f"{opts['processes']} worker processes of queue(s) {', '.join(opts['queues'])}, "
            "restarted when they die; SIGTERM/SIGINT stops them all"
            + (
                f"\n  metrics (all processes): {server.url} (files in {server.directory})"
                if server is not None
                else ""
            )
        )
        self.stdout.flush()
        self._install_signals(supervisor, grace)
        try:
            code = supervisor.run()
        finally:
            if server is not None:
                server.close()
        if code:
            sys.exit(code)

    def _child_argv(self, opts: dict[str, Any]) -> list[str]:
        """A child's command line: this one with ``--processes 1``."""
        argv = [sys.executable, "-m", "django", "runconsumer", *opts["queues"]]
        for name in opts["consumer"]:
            argv += ["--consumer", name]
        if opts["burst"]:
            argv.append("--burst")
        if opts["batch_ack"]:
            argv.append("--batch-ack")
        if opts.get("fixed_threads"):
            argv.append("--fixed-threads")
        for dest, flag in self.CHILD_OPTIONS:
            if opts[dest] is not None:
                argv += [flag, str(opts[dest])]
        return [*argv, "--processes", "1"]

    def _banner(self, worker: Worker, opts: dict[str, Any]) -> None:
        config = get_core_config()
        broker = worker.broker
        mode = "burst" if opts["burst"] else "continuous"
        if opts["batch_ack"]:
            mode += ", acks per batch"
        if opts.get("fixed_threads"):
            mode += ", fixed threads"
        if opts["max_messages"]:
            mode += f", at most {opts['max_messages']} messages"
        lines = [
            f"redisq worker {socket.gethostname()}:{os.getpid()} ({mode}"
            f"{', supervised' if is_supervised() else ''}), Redis "
            f"{broker.where}, prefix {config.prefix!r}",
        ]
        rows = {
            (r.queue.name, r.name): r
            for r in Consumer.objects.select_related("queue").filter(queue__name__in=opts["queues"])
        }
        for spec in worker.specs.values():
            row = rows[spec.key]
            state = "paused" if spec.paused else ("disabled" if not spec.enabled else "running")
            lines.append(f"  {spec.queue}/{spec.name} [{state}] -> {row.handler}")
            parts = []
            for field in TUNABLES:
                eff = row.effective(field, config)
                value, source = eff.value, eff.source
                if field == "concurrency" and opts["concurrency"]:
                    value, source = opts["concurrency"], "--concurrency"
                if value is None:  # a limit not set: none, or (burst) the rate's default
                    if field == "burst" or source == "settings":
                        continue  # only the limits that apply, and their lifts
                    value = "none"
                parts.append(f"{field}={value} ({source})")
            lines.append("      " + ", ".join(parts) + f", start={row.start}")
        lines += listing.banner_lines(listing.listed(now_ms()))  # rows synced just now
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    def _install_signals(self, worker: Worker | Supervisor, grace: float) -> None:
        supervised = is_supervised()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if supervised and signum != COLD_SIGNAL:
                # A supervisor asks once; a service manager may signal us too.
                if not worker.stopping:
                    worker.stop()
                    logger.warning("%s: finishing in-flight messages", name)
            elif worker.stopping or signum == COLD_SIGNAL:
                logger.warning("%s again: exiting now, without finishing in-flight messages", name)
                worker.stop(cold=True)
            else:
                # Stop first: a second signal can interrupt this handler while it logs,
                # and must then find the worker stopping to mean "exit now".
                worker.stop()
                logger.warning(
                    "%s: finishing in-flight messages (grace period %.0f s); "
                    "send it again to exit now",
                    name,
                    grace,
                )

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if supervised:
            signal.signal(COLD_SIGNAL, on_signal)


def _task_queues(names: list[str]) -> list[str]:
    """The redisq queues (every priority level) of Django task queues ``names``."""
    import django

    if django.VERSION < (6, 0):
        raise CommandError(
            f"--tasks needs Django 6.0 or newer (django.tasks); this is {django.get_version()}."
        )
    from redisq_django.tasks.task_queues import task_queues

    try:
        return task_queues(names)
    except RedisqError as exc:
        raise CommandError(str(exc)) from None


def _serve(opts: dict[str, Any], *, supervisor: bool) -> MetricsServer:
    """Start the metrics endpoint of ``--metrics-port`` / ``--metrics-host``."""
    from redisq_django.metrics import exporter

    host = opts["metrics_host"] or DEFAULT_HOST
    serve = exporter.serve_supervisor if supervisor else exporter.serve_worker
    return serve(opts["metrics_port"], host)


def _child_env() -> dict[str, str]:
    """This environment, with the settings module and Python path a child needs."""
    from django.conf import settings

    module = settings.SETTINGS_MODULE
    if not module:
        raise CommandError(
            "--processes needs DJANGO_SETTINGS_MODULE (or --settings): the worker "
            "processes load the settings themselves"
        )
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=module)
    # Whatever this process can import (e.g. the directory of manage.py, --pythonpath),
    # the child can too.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
