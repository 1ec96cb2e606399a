"""Metrics and tracing for machines: Prometheus and OpenTelemetry, as worker middleware.

Optional extras: ``pip install 'redisq-django[metrics]'`` (prometheus-client) and
``'redisq-django[otel]'`` (opentelemetry-api). Nothing here is imported unless it is used,
and no module imports either library at its top: each asks :mod:`.extras` when it needs
one, which names the extra to install when it is missing.

* :mod:`.families`: metric names, help texts and buckets (no library needed).
* :mod:`.prometheus`: :class:`~.prometheus.PrometheusMiddleware`, the worker's counters and
  histograms.
* :mod:`.exporter`: the HTTP endpoint of ``runconsumer --metrics-port`` (also for
  ``--processes N``, through prometheus-client's multiprocess mode).
* :mod:`.gauges`: gauges read from Redis at scrape time (backlog, pending, ages...).
* :mod:`.views`: the Django ``/metrics`` view of those gauges (``redisq_django.urls``).
* :mod:`.tracing`: :class:`~.tracing.Tracing`, W3C trace context in the headers, ``send``
  and ``process`` spans.
"""
