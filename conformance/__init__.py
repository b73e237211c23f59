"""The rtmm-protocol conformance suite, installed as ``rtmm_protocol.conformance``."""
