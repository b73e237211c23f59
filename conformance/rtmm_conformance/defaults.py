"""Defaults of a conformance run, importable without torch (the pytest plugin reads them
to declare its options in every pytest run)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_DTYPE",
    "DEFAULT_EXAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_TIMEOUT_S",
    "DTYPE_NAMES",
    "FAIL_ON",
    "ISOLATIONS",
    "NODE_PREFIX",
    "REFERENCE_MODEL_STATE",
]

#: Fixed so that two runs of the same target see the same batches; printed in the header.
DEFAULT_SEED: Final = 20260
#: Random examples per check and mode, on top of each check's hand-placed cases.
DEFAULT_EXAMPLES: Final = 30
#: Seconds one check (in one mode) may take before it is failed as hanging.
DEFAULT_TIMEOUT_S: Final = 120.0
#: dtype names accepted on the command line.
DTYPE_NAMES: Final = ("float32", "float16", "bfloat16")
#: The dtype of the state's buffer when none is asked for.
DEFAULT_DTYPE: Final = DTYPE_NAMES[0]
#: Where checks run: ``process`` (a worker process: CUDA-safe, a crash or a hang fails one
#: check), ``off`` (the calling process), ``auto`` (``process`` unless the factory cannot
#: be sent to another process).
ISOLATIONS: Final = ("auto", "process", "off")

#: What makes a run fail: ``own`` contract failures only (the default for a target with a
#: baseline, such as a vLLM class), every ``contract`` failure (the default otherwise), or
#: ``all``: robustness and SHOULD failures too (the strict profile, ``--conformance-strict``).
FAIL_ON: Final = ("own", "contract", "all")

#: The factory ``pytest --conformance`` checks when given no value.
REFERENCE_MODEL_STATE: Final = "rtmm_conformance.targets:reference_model_state"

#: First part of every suite node ID: ``rtmm-conformance::G5-rows-match-mask[realtime]``.
NODE_PREFIX: Final = "rtmm-conformance"
