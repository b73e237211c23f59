"""vLLM 0.24.0's encoder-runner signature, with computed_prefill_lens, is rejected by
both checkers (SPEC T2); vLLM 0.28 to 0.33's is accepted (tests/typing/pass)."""

from __future__ import annotations

from support.vllm_typing_examples import PreRenameEngineRunner

from rtmm_protocol import MMEmbeddingGatherer

pre_rename: MMEmbeddingGatherer = PreRenameEngineRunner()  # E: assignment  # P: reportAssignmentType
