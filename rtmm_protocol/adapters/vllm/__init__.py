"""Check a vLLM ModelRunner V2 class by naming it: ``pytest --conformance=vllm:MODULE:CLASS``.

Given ``MODULE:CLASS``, :func:`load_target` returns the factories the suite runs its
checks with: ``CLASS`` built the way vLLM builds it, around the suite's toy model and
encoder cache, with the contract's names added where vLLM spells them differently.

* A subclass of vLLM's ``ModelState`` (``DefaultModelState`` or a fork of it) is built
  as ModelRunner V2 builds a model state, ``CLASS(vllm_config, model, encoder_cache,
  device)``, and checked at the ModelState level: every clause, dummy runs and the real
  path included.
* A subclass of vLLM's ``EncoderRunner`` is built as a model state builds its runner and
  checked at the runner level (the gather, error and signature clauses).

The adapter translates types and corrects nothing, so vLLM's own behaviour shows in the
report, deviations included. It imports vLLM only when a target is loaded or built;
importing this package does not. Supported vLLM releases: :data:`SUPPORTED_RANGE`
(:data:`TESTED_VERSIONS` in continuous integration).
"""

from __future__ import annotations

from rtmm_protocol.adapters.vllm.availability import (
    CPU_INSTALLER,
    SUPPORTED_RANGE,
    TESTED_VERSIONS,
    VllmUnavailableError,
    installed_vllm_version,
    is_supported,
)
from rtmm_protocol.adapters.vllm.class_spec import VllmSpecError
from rtmm_protocol.adapters.vllm.factories import VllmFactory
from rtmm_protocol.adapters.vllm.target import VllmTarget, load_target

__all__ = [
    "CPU_INSTALLER",
    "SUPPORTED_RANGE",
    "TESTED_VERSIONS",
    "VllmFactory",
    "VllmSpecError",
    "VllmTarget",
    "VllmUnavailableError",
    "installed_vllm_version",
    "is_supported",
    "load_target",
]
