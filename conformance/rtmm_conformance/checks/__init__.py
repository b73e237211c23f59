"""The checks, one module per area of the specification, each check carrying its clause ID."""
