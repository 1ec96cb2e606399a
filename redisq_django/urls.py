"""URLs of redisq_django for the project's URLconf: ``path("redisq/",
include("redisq_django.urls"))``.

* ``metrics``: the Prometheus view of every queue and consumer (:mod:`.metrics.views`).

The admin pages live in the admin site, not here.
"""

from __future__ import annotations

from django.urls import path

from redisq_django.metrics.views import metrics

app_name = "redisq"

urlpatterns = [
    path("metrics", metrics, name="metrics"),
]
