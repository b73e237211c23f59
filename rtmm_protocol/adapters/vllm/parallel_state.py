"""vLLM's parallel state for one process, for the layers a model state's model is made of.

Some of the objects vLLM's model states take from their model are vLLM layers
(``VocabParallelEmbedding`` and what is built on it), which read the tensor-parallel
group when they are made. :func:`single_process_parallel_state` sets up vLLM's own
distributed environment for a world of one process (the ``gloo`` backend, a file
rendezvous in a temporary folder, so that processes never compete for a port), once per
process, and makes a vLLM config current while the layers are built.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

import torch

from rtmm_protocol.adapters.vllm.availability import import_vllm

__all__ = ["single_process_parallel_state"]


@contextlib.contextmanager
def single_process_parallel_state() -> Iterator[None]:
    """Inside: vLLM's parallel groups exist (a world of one) and a vLLM config is current."""
    config = import_vllm("vllm.config")
    distributed = import_vllm("vllm.distributed")
    parallel = import_vllm("vllm.distributed.parallel_state")
    vllm_config = config.VllmConfig(device_config=config.DeviceConfig(device=torch.device("cpu")))
    with config.set_current_vllm_config(vllm_config):
        if not parallel.model_parallel_is_initialized():
            rendezvous = os.path.join(tempfile.mkdtemp(prefix="rtmm-vllm-"), "rendezvous")
            distributed.init_distributed_environment(
                world_size=1,
                rank=0,
                local_rank=0,
                distributed_init_method=f"file://{rendezvous}",
                backend="gloo",
            )
            distributed.initialize_model_parallel(1, 1)
        yield
