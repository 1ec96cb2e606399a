import os

from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # BENCH_OTEL_SDK=1 (the "tracing on, SDK" drain row): the OpenTelemetry SDK records
        # every span and hands it to a batch processor whose exporter drops it, so the row
        # measures recording, not an exporter's network. BENCH_OTEL_SDK=sampled: the same,
        # keeping 1 % of traces (ParentBased(TraceIdRatioBased(0.01))).
        sdk = os.environ.get("BENCH_OTEL_SDK")
        if sdk in ("1", "sampled"):
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                SpanExporter,
                SpanExportResult,
            )

            class Drop(SpanExporter):
                def export(self, spans):  # type: ignore[no-untyped-def]
                    return SpanExportResult.SUCCESS

            from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

            if sdk == "sampled":
                provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.01))
            else:
                provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(Drop()))
            trace.set_tracer_provider(provider)
