"""A vLLM model state of one's own that reads its model's configuration when it is built.

:class:`ReplayWindowState` is DeepSeek V4.1's model state (vLLM's
``DeepseekV41ModelState``) with a per-request window of its own, sized from the
checkpoint's configuration: it reads ``hf_text_config.replay_window``, a value this
checkpoint's ``config.json`` holds and DeepSeek V4.1's own configuration does not. So the
suite can build it only around a toy model that carries that configuration:

    pytest --conformance=vllm:replay_state:ReplayWindowState \\
        --conformance-model-config=checkpoint/config.json

Without ``--conformance-model-config`` the build fails, and T1's message says which value
the state read, on which line, and which option supplies it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.models.deepseek_v41.nvidia.model_state import (  # type: ignore[import-not-found, unused-ignore]
    DeepseekV41ModelState,
)

__all__ = ["ReplayWindowState"]


class ReplayWindowState(DeepseekV41ModelState):  # type: ignore[misc, unused-ignore]
    """DeepSeek V4.1's state, with the last ``replay_window`` token ids of each request."""

    def __init__(self, vllm_config: Any, model: Any, encoder_cache: Any, device: Any) -> None:
        super().__init__(vllm_config, model, encoder_cache, device)
        window = int(self.model_config.hf_text_config.replay_window)
        self.replay_tokens = torch.full(
            (self.max_num_reqs, window), -1, dtype=torch.int32, device=device
        )
