"""Settings of ``bench/tasks.py``: the redisq tasks backend ("default") and
django-tasks-db's database backend ("db") side by side, one SQLite file, one Redis.

Environment: BENCH_REDIS_URL (the benchmark's redis-server), BENCH_DB (SQLite path), or
BENCH_PG_HOST/PORT/USER (a PostgreSQL cluster the benchmark started, when it could).
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
    "django_tasks_db",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB", os.path.join(tempfile.gettempdir(), "tasks-bench.db")),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}
if os.environ.get("BENCH_PG_PORT"):  # django-tasks-db's production database: PostgreSQL
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": os.environ["BENCH_PG_USER"],
        "HOST": os.environ["BENCH_PG_HOST"],
        "PORT": os.environ["BENCH_PG_PORT"],
        # Persistent connections: db_worker closes stale ones around each task, which
        # with CONN_MAX_AGE = 0 means a new PostgreSQL connection (a forked backend)
        # per task. Production would keep them.
        "CONN_MAX_AGE": 600,
    }
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
REDISQ = {"URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")}
TASKS = {
    "default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["bench"]},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["bench"]},
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
