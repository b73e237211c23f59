"""Helpers shared by the test modules (importable as ``support``)."""
