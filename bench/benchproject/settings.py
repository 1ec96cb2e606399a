"""Django settings for the redisq benchmark (``bench/run.py`` starts it).

Environment:
    BENCH_REDIS_URL  the private redis-server the benchmark started (required).
    BENCH_DB         path of the SQLite database (a temporary directory).
"""

import os
import tempfile

SECRET_KEY = "redisq-bench-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "redisq_django",
    "benchapp",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB", os.path.join(tempfile.gettempdir(), "redisq-bench.db")),
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDISQ = {
    "URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    # The library default, spelled out: it bounds delayed-message lateness.
    "POLL_INTERVAL": float(os.environ.get("BENCH_POLL_INTERVAL", "0.05")),
    # Lifecycle events on (the "history on" drain row).
    "HISTORY": os.environ.get("BENCH_HISTORY") == "1",
}
# Keys newer than the old tree some drain rows run (bench/run.py, BATCH_ACK_REF) are set
# only away from their defaults: that tree refuses keys it does not know.
if os.environ.get("BENCH_TRACING") == "1":  # tracing of each handler ("tracing on" rows)
    REDISQ["TRACING"] = True
if os.environ.get("BENCH_TRENDS", "1") != "1":  # per-minute trend counters ("trends off")
    REDISQ["TRENDS"] = False

if os.environ.get("BENCH_TASKS") == "1":  # the Tasks backend (bench/drain_budget.py)
    TASKS = {"default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["bench_tasks"]}}

LOGGING = {"version": 1, "disable_existing_loggers": False}
