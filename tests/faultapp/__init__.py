"""Consumers used only by the fault-injection tests (tests/faults/test_faults.py)."""
