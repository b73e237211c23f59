"""Driving a target: building it from a factory and calling it the way the checks need."""
