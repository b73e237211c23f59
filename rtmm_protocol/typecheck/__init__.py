"""``python -m rtmm_protocol typecheck MODULE:CLASS [...]``: does a class fit the contract?

The command imports each class, decides which Protocol it is meant to satisfy (or takes
``--protocol``), and combines three verdicts: the run-time signature check of
:mod:`rtmm_protocol.signatures` (the one the conformance suite runs), mypy and, when it is
installed, pyright, both run on a generated module that assigns the class to its Protocol
(:mod:`rtmm_protocol.typecheck.static`). A class conforms only if all of them accept it, so
the command rejects everything the suite's signature check rejects, and more (parameter
and return types).
"""

from rtmm_protocol.typecheck.cli import main

__all__ = ["main"]
