"""Orders in the admin."""

from django.contrib import admin

from shop.models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id",
        "email",
        "total",
        "created_at",
        "billed_at",
        "confirmed_at",
        "fraud_checked_at",
    )
