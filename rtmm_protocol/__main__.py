"""Command line: ``python -m rtmm_protocol typecheck ...``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = """usage: python -m rtmm_protocol COMMAND [ARGS...]

commands:
  typecheck MODULE:CLASS [...]   check statically that classes satisfy the Protocols

Run a command with --help for its options."""


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "typecheck":
        from rtmm_protocol.typecheck import main as typecheck_main

        return typecheck_main(rest)
    if command == "matrix":
        # The contract never imports the suite: the matrix belongs to it.
        print(
            "the matrix moved to the suite: python -m rtmm_conformance matrix ...", file=sys.stderr
        )
        return 2
    print(f"unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
