"""URLs of the example project: the admin, and redisq's Prometheus view at
/redisq/metrics (staff with the view_queue permission, or REDISQ["METRICS_TOKEN"])."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("redisq/", include("redisq_django.urls")),
]
