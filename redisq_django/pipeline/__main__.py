"""Run a pipeline job: ``python -m redisq_django.pipeline JOB [options]``.

Examples::

    # everything in Redis now, then exit; prints "archived messages=N events=M ..."
    python -m redisq_django.pipeline archive --redis-url redis://localhost:6379/0 \\
        --root /data/redisq-archive --once

    # keep archiving, a micro-batch every 10 s, until SIGTERM/SIGINT
    python -m redisq_django.pipeline archive --redis-url redis://localhost:6379/0 \\
        --root /data/redisq-archive --queue orders --queue mail --trigger 10

    # the same through spark-submit (its options before the script, ours after it)
    spark-submit --master spark://host:7077 redisq_django/pipeline/__main__.py \\
        archive --redis-url redis://redis-host:6379/0 --root hdfs:///redisq/archive --once

Under ``spark-submit`` the master is spark-submit's unless ``--master`` is given after the
job name. ``redisq_django`` must be importable by the driver's Python (installed, or the
script run from a source checkout); the job ships it to the executors itself. Run
``python -m redisq_django.pipeline archive --help`` for every option.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as a script (spark-submit .../__main__.py): Python put this directory first on
    # sys.path, where our module names would shadow top-level ones; put the checkout's
    # root there instead, so that `redisq_django` imports from it when not installed.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent.parent))

from redisq_django.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
