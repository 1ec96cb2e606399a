"""Django settings of our row of the peer benchmark (``runconsumer peers``).

Environment: ``PEERS_REDIS_URL`` (the harness's redis-server) and ``PEERS_DB`` (the
SQLite file, in the harness's temporary directory). Everything else is the library's
default, as a site that only sets its Redis URL runs it.
"""

import os
import tempfile

SECRET_KEY = "redisq-peers-bench-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "redisq_django",
    "peersapp",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("PEERS_DB", os.path.join(tempfile.gettempdir(), "peers.db")),
    }
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
REDISQ = {"URL": os.environ.get("PEERS_REDIS_URL", "redis://127.0.0.1:6379/0")}
LOGGING = {"version": 1, "disable_existing_loggers": False}
