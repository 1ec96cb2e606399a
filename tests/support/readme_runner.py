"""The README's History-on-Spark commands run one after the other in one process of the
example project with one Spark session, as a long-lived shell or notebook runs its jobs:
``manage.py ...`` through Django's ``execute_from_command_line`` with the example
project's settings, ``python -m redisq_django.pipeline ...`` through that module's
``main``. Each command finds the session its predecessors left (``pipeline_session``
reuses it and leaves it running), so a command costs its job, not a JVM's start.

Run by ``tests/pipeline/test_readme_spark.py`` with the example project as the working
directory: reads one command line per line of stdin (a JSON list of words, ``python``
left out: ``["manage.py", "redisq_pipeline", "report"]``, ``["-m",
"redisq_django.pipeline", "report", ...]``) and answers each with one line on stdout,
:data:`MARK` then JSON ``{"status": exit status, "out": its stdout, "err": its stderr}``
(stderr as far as Python writes it: Spark's JVM writes to the process's own).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from collections.abc import Callable

MARK = "readme-runner:"
PIPELINE_MODULE = ["-m", "redisq_django.pipeline"]


def _exit_status(exc: SystemExit, err: io.StringIO) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=err)  # sys.exit("message"), as manage.py's own refusal
    return 1


def run(
    argv: list[str], manage: Callable[[list[str]], None], pipeline: Callable[..., int]
) -> dict[str, object]:
    """Run one command line; its exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if argv[0] == "manage.py":
                manage(argv)
            elif argv[:2] == PIPELINE_MODULE:
                status = pipeline(argv[2:])
            else:
                raise ValueError(f"the runner runs manage.py and -m redisq_django.pipeline: {argv}")
        except SystemExit as exc:
            status = _exit_status(exc, err)
        except Exception:
            traceback.print_exc(file=err)
            status = 1
    return {"status": status, "out": out.getvalue(), "err": err.getvalue()}


def main() -> None:
    sys.path.insert(0, os.getcwd())  # the example project's packages, as manage.py has them
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from redisq_django.pipeline.cli import main as pipeline_main
    from redisq_django.pipeline.session import build_session

    build_session()  # the session every command reuses, as the command line builds it
    replies = sys.stdout
    print(f"{MARK}ready", file=replies, flush=True)
    for line in sys.stdin:
        reply = run(json.loads(line), execute_from_command_line, pipeline_main)
        print(MARK + json.dumps(reply), file=replies, flush=True)


if __name__ == "__main__":
    main()
