"""A ModelState written from the rtmm-protocol specification alone, one request at a time.

The guide "Write your ModelState from scratch" in the docs walks through it; CI runs the
conformance suite on it (``--conformance=from_scratch_state.factory:make_state``) and
``mypy --strict``.
"""
