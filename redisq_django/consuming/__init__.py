"""Consuming from Django: ``@consumer`` declarations, their rows, and the worker runner."""
