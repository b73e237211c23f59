"""Adapters that let the conformance suite check a serving engine's own classes.

Each engine has a subpackage (:mod:`rtmm_protocol.adapters.vllm`) that the suite imports
by name when a target spec asks for it (``--conformance=vllm:MODULE:CLASS``). Importing
this package, or any adapter, imports no engine: an adapter imports its engine only when
a target is loaded or built.
"""

from __future__ import annotations

__all__: list[str] = []
