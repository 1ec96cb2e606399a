"""The URLconf of tests/settings_without_admin.py: our own URLs, no admin site."""

from django.urls import include, path

urlpatterns = [
    path("redisq/", include("redisq_django.urls")),
]
