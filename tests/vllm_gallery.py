"""vLLM ModelRunner V2 subclasses for the adapter's tests: one bug of their own each, or none.

Importable only where vLLM is (the adapter's tests skip elsewhere). The adapter builds
them by name, ``vllm:vllm_gallery:CLASS``, in the suite's worker process, which finds
this module because the tests' folder is on ``sys.path``.

* :class:`CopyingDummyState` hands dummy runs a copy of the persistent ``inputs_embeds``
  buffer instead of a view of it: a CUDA graph captured on the copy would never see the
  embeddings of the real step (SPEC D2). Every other deviation it shows is inherited from
  vLLM's ``DefaultModelState``.
* :class:`PromptExtendingRunner` extends ``prefill_lens`` to cover each step's scheduled
  tokens in the caller's own array before gathering, on top of vLLM's ``EncoderRunner``:
  the engine's batch is changed under it (SPEC G9).
* :class:`PlainSubclassState` changes nothing: all its failures are inherited.
* :class:`OwnHiddenSizeState` assigns ``hidden_size`` in its ``__init__`` (to a wrong
  value): the adapter must show the class's own attribute, not replace it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from vllm.v1.worker.gpu.mm.encoder_runner import (  # type: ignore[import-not-found, unused-ignore]
    EncoderRunner,
)
from vllm.v1.worker.gpu.model_states.default import (  # type: ignore[import-not-found, unused-ignore]
    DefaultModelState,
)

__all__ = ["CopyingDummyState", "PromptExtendingRunner", "OwnHiddenSizeState", "PlainSubclassState"]


class CopyingDummyState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state whose dummy runs get a copy of the buffer (breaks D2)."""

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor:
        buffer: torch.Tensor = super().dummy_inputs_embeds(num_tokens)
        return buffer.clone()


class PromptExtendingRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that extends the caller's ``prefill_lens`` in place."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: npt.NDArray[np.int64],
        query_start_loc: npt.NDArray[np.int64],
        prefill_lens: npt.NDArray[np.int64],
        num_computed_tokens: npt.NDArray[np.int64],
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        end = num_computed_tokens + num_scheduled_tokens
        np.maximum(prefill_lens, end, out=prefill_lens)  # the bug: the caller's array
        result: tuple[list[torch.Tensor], torch.Tensor] = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        return result


class PlainSubclassState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state under another name: nothing of its own."""


class OwnHiddenSizeState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Sets ``hidden_size`` itself, one more than vLLM's ``inputs_embeds_size``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_size = self.inputs_embeds_size + 1
