"""The app of the worker-only project of tests/settings_without_admin.py."""
