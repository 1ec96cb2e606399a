"""The optional libraries, imported on first use with an error that names the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from redisq_django.core.errors import ConfigurationError


class MissingExtra(ConfigurationError):
    """An optional library that a feature needs is not installed."""


def _require(module: str, feature: str, extra: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(
            f"{feature} needs the {package} package, which is not installed ({exc}). "
            f"Install the {extra!r} extra: pip install 'redisq-django[{extra}]'."
        ) from None


def prometheus() -> ModuleType:
    """``prometheus_client``.

    Raises:
        MissingExtra: it is not installed (the ``metrics`` extra).
    """
    return _require("prometheus_client", "Prometheus metrics", "metrics", "prometheus-client")


def opentelemetry_trace() -> ModuleType:
    """``opentelemetry.trace`` (the API; the application configures the SDK).

    Raises:
        MissingExtra: it is not installed (the ``otel`` extra).
    """
    return _require("opentelemetry.trace", "OpenTelemetry tracing", "otel", "opentelemetry-api")
