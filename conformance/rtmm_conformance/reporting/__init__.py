"""Reporting: the verdict record of a check, causes, the report, expected failures, the matrix."""
