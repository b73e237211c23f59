"""The conformance suite's former import path, kept only to say where the suite went.

The suite is the package ``rtmm_conformance`` (same distribution, same checks); importing
anything under ``rtmm_protocol.conformance`` fails with the one-line change to make.
"""

raise ModuleNotFoundError(
    "rtmm_protocol.conformance has moved to the package rtmm_conformance: replace "
    "'rtmm_protocol.conformance' with 'rtmm_conformance' in your imports and in "
    "'-p rtmm_protocol.conformance.plugin' (for example "
    "'from rtmm_conformance import check_model_state')",
    name="rtmm_protocol.conformance",
)
