"""Command line: ``python -m rtmm_conformance matrix REPORT.json ...``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = """usage: python -m rtmm_conformance COMMAND [ARGS...]

commands:
  matrix REPORT.json [...]       merge conformance reports into one compliance matrix

Run the suite itself with pytest: pytest --conformance[=MODULE:FACTORY].
Run a command with --help for its options."""


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "matrix":
        from rtmm_conformance.reporting.matrix import main as matrix_main

        return matrix_main(rest)
    print(f"unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
