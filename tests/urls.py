from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The package's own URLs (the Prometheus view at /redisq/metrics).
    path("redisq/", include("redisq_django.urls")),
]
