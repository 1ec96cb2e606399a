"""Management and pipeline commands run one after the other in one long-lived process of
a Django project, as a shell or a notebook runs them: ``manage.py ...`` through Django's
``execute_from_command_line``, ``python -m redisq_django.pipeline ...`` through that
module's ``main``. A command then costs its own work, not a Python start, Django's setup
and (with ``--spark``) a JVM's start: the README's History-on-Spark commands share one
Spark session this way (``tests/pipeline/test_readme_spark.py``; ``pipeline_session``
reuses the session the process built), the worker-only project's commands one process
(``tests/management/test_without_admin.py``).

The process (``python tests/support/command_runner.py [--spark]``, started by
:class:`CommandRunner` in the project's directory with its ``DJANGO_SETTINGS_MODULE``)
reads one command line per line of stdin (a JSON list of words, ``python`` left out:
``["manage.py", "redisq", "status"]``, ``["-m", "redisq_django.pipeline", "report",
...]``) and answers each with one line on stdout, :data:`MARK` then JSON ``{"status":
exit status, "out": its stdout, "err": its stderr}`` (stderr as far as Python writes it:
Spark's JVM writes to the process's own).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

MARK = "command-runner:"
PIPELINE_MODULE = ["-m", "redisq_django.pipeline"]


def _exit_status(exc: SystemExit, err: io.StringIO) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=err)  # sys.exit("message"), as manage.py's own refusal
    return 1


class _Current:
    """``sys.stdout`` or ``sys.stderr``, whichever it is when written to."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, text: str) -> int:
        return getattr(sys, self.name).write(text)

    def flush(self) -> None:
        getattr(sys, self.name).flush()


def _logging_follows_redirects() -> None:
    """Point the log handlers that write to the process's stdout or stderr (Django's
    console handler, one a command added) at the command's: a process of its own would
    show its log lines in its output."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if not isinstance(handler, logging.StreamHandler):
                continue
            if handler.stream in (sys.__stderr__, sys.__stdout__):
                name = "stderr" if handler.stream is sys.__stderr__ else "stdout"
                handler.setStream(_Current(name))  # type: ignore[arg-type]
            elif isinstance(handler.stream, io.StringIO):  # a command's, ended
                handler.setStream(_Current("stderr"))  # type: ignore[arg-type]


def run(argv: list[str], manage: Callable[[list[str]], None]) -> dict[str, object]:
    """Run one command line; its exit status and output."""
    _logging_follows_redirects()
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if argv[0] == "manage.py":
                manage(argv)
            elif argv[:2] == PIPELINE_MODULE:
                from redisq_django.pipeline.cli import main as pipeline_main

                status = pipeline_main(argv[2:])
            else:
                raise ValueError(f"the runner runs manage.py and -m redisq_django.pipeline: {argv}")
        except SystemExit as exc:
            status = _exit_status(exc, err)
        except Exception:
            traceback.print_exc(file=err)
            status = 1
    return {"status": status, "out": out.getvalue(), "err": err.getvalue()}


def main() -> None:
    sys.path.insert(0, os.getcwd())  # the project's packages, as its manage.py has them
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    if "--spark" in sys.argv[1:]:
        from redisq_django.pipeline.session import build_session

        build_session()  # the session every command reuses, as the command line builds it
    replies = sys.stdout
    print(f"{MARK}ready", file=replies, flush=True)
    for line in sys.stdin:
        reply = run(json.loads(line), execute_from_command_line)
        print(MARK + json.dumps(reply), file=replies, flush=True)


class CommandRunner:
    """The test's side: one runner process in ``cwd`` with ``env`` (its stderr in
    ``log``), started at its first command; :meth:`stop` ends it."""

    def __init__(
        self, cwd: Path, env: dict[str, str], log: Path, *, spark: bool, timeout: float
    ) -> None:
        self.cwd, self.env, self.log = cwd, env, log
        self.spark, self.timeout = spark, timeout
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread
        self.replies: queue.Queue[str | None] = queue.Queue()

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (``python`` left out) in the runner; its status and output."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self._reply())
        return subprocess.CompletedProcess(argv, reply["status"], reply["out"], reply["err"])

    def _start(self) -> None:
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, *(["--spark"] if self.spark else [])],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()
        assert self._reply() == "ready"

    def _read(self, proc: subprocess.Popen[str]) -> None:
        # The JVM and Spark's workers may write to the runner's stdout too: only the
        # runner's marked lines are replies.
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARK):
                self.replies.put(line[len(MARK) :].strip())
        self.replies.put(None)  # it exited

    def _reply(self) -> str:
        try:
            reply = self.replies.get(timeout=self.timeout)
        except queue.Empty:
            raise AssertionError(
                f"the runner did not answer in {self.timeout:.0f} s: {self._said()}"
            ) from None
        if reply is None:
            raise AssertionError(f"the runner exited: {self._said()}")
        return reply

    def _said(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # its loop ends, and the process with it
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.reader.join(timeout=30)  # it read to the end of the runner's output
        assert self.proc.stdout is not None
        self.proc.stdout.close()


if __name__ == "__main__":
    main()
