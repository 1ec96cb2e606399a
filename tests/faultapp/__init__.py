"""Consumers used only by the fault-injection tests (tests/test_faults.py)."""
