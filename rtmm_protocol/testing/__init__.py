"""What tests of a ModelState need, in the manner of ``numpy.testing`` and ``torch.testing``.

The conformance suite and the reference implementation use these same pieces, so a
user's own tests see exactly what the suite sees:

* inputs: :class:`ReferenceInputBatch` (a concrete ``InputBatch`` from per-request lists),
  :func:`request_states_for` (the ``req_states`` argument of ``get_mm_embeddings``), and
  :class:`GatherScenario` with :class:`RequestSpec` / :class:`FeatureSpec` (one gather
  call's inputs in plain numbers; random ones in :mod:`rtmm_protocol.testing.strategies`,
  which needs ``hypothesis``);
* toy models whose outputs are easy to predict: :class:`ToyReplaceModel` (replaces token
  rows), :class:`ToyRealtimeModel` (realtime, adds to them), :class:`ToyTextModel` (no
  encoder), and :func:`make_input_features`;
* the expected answer: :func:`oracle_gather`, the gather semantics (SPEC G1-G10) position
  by position, independent of any implementation;
* observation: :class:`InstrumentedEncoderCache` (records the keys a target reads and
  writes), :func:`attach_encoder_log` (records encoder calls) and :class:`CacheSnapshot`
  (tells whether a call changed a cache).

Names are imported on first use, as in :mod:`rtmm_protocol`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtmm_protocol.testing.input_batch import ReferenceInputBatch
    from rtmm_protocol.testing.instruments import (
        EncoderCallLog,
        InstrumentedEncoderCache,
        attach_encoder_log,
    )
    from rtmm_protocol.testing.oracle import OracleResult, oracle_gather
    from rtmm_protocol.testing.request_states import request_states_for
    from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec
    from rtmm_protocol.testing.snapshots import CacheSnapshot
    from rtmm_protocol.testing.toy_models import (
        ToyRealtimeModel,
        ToyReplaceModel,
        ToyTextModel,
        make_input_features,
    )

__all__ = [
    "CacheSnapshot",
    "EncoderCallLog",
    "FeatureSpec",
    "GatherScenario",
    "InstrumentedEncoderCache",
    "OracleResult",
    "ReferenceInputBatch",
    "RequestSpec",
    "ToyRealtimeModel",
    "ToyReplaceModel",
    "ToyTextModel",
    "attach_encoder_log",
    "make_input_features",
    "oracle_gather",
    "request_states_for",
]

# Public name -> defining module, for the lazy imports below.
_EXPORTS = {
    "CacheSnapshot": "snapshots",
    "EncoderCallLog": "instruments",
    "FeatureSpec": "scenario",
    "GatherScenario": "scenario",
    "InstrumentedEncoderCache": "instruments",
    "OracleResult": "oracle",
    "ReferenceInputBatch": "input_batch",
    "RequestSpec": "scenario",
    "ToyRealtimeModel": "toy_models",
    "ToyReplaceModel": "toy_models",
    "ToyTextModel": "toy_models",
    "attach_encoder_log": "instruments",
    "make_input_features": "toy_models",
    "oracle_gather": "oracle",
    "request_states_for": "request_states",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rtmm_protocol.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
