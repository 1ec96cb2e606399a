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
    # OpenTelemetry tracing of each handler (the "tracing on" drain rows).
    "TRACING": os.environ.get("BENCH_TRACING") == "1",
    # Per-minute trend counters, on by default (the "trends off" drain rows turn them off).
    "TRENDS": os.environ.get("BENCH_TRENDS", "1") == "1",
}

LOGGING = {"version": 1, "disable_existing_loggers": False}
