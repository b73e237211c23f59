"""``python -m rtmm_protocol typecheck MODULE:CLASS [...]``: does a class match its Protocol?

The command imports each class, decides which Protocol it is meant to satisfy (or takes
``--protocol``), and combines three verdicts on the class's method signatures and
attribute types: the run-time signature check of :mod:`rtmm_protocol.signatures` (the one
the conformance suite runs), mypy and, when it is installed, pyright, both run on a
generated module that assigns the class to its Protocol
(:mod:`rtmm_protocol.typecheck.static`). A class matches only if all of them accept it,
so the command rejects everything the suite's signature check rejects, and more
(parameter and return types).

What it does not do is type-check the class's own module: the checkers read it only to
learn the class's types, and report no error from it (the method bodies included). The
verdict says so and prints the ``mypy --strict`` and ``pyright`` lines that check the
modules themselves.
"""

from rtmm_protocol.typecheck.cli import main

__all__ = ["main"]
