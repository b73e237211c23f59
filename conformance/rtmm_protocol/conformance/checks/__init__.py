"""The check implementations, one module per area of the specification."""
