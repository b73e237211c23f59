"""The CUDA-graph check (SPEC R4): capture on a dummy run, replay after the real path.

The graph is captured around a small forward that reads what a dummy run hands the
model, the way an engine captures its model: ``dummy_inputs_embeds(n)``, or for a state
with the model-inputs hooks the ``inputs_embeds`` of ``prepare_dummy_inputs`` (SPEC M1).
After a real step for a batch of ``n`` padded tokens (``get_mm_embeddings``, then
``prepare_inputs``' overrides), replaying the graph must give what the forward computes
eagerly on the embeddings the model receives.
"""

from __future__ import annotations

import torch

from rtmm_conformance.checks.registry import check
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.model_inputs import capture_inputs
from rtmm_conformance.driving.real_step import prepare_real_step
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

__all__: list[str] = []

_GRAPH_STEP = GatherScenario(
    requests=(
        RequestSpec(
            "a", 12, 0, 7, (FeatureSpec("a0", 1, 3), FeatureSpec("a1", 4, 3, cached=False))
        ),
        RequestSpec("b", 3, 5, 2, (FeatureSpec("b0", 5, 4, cached=False),)),
    ),
    padding=3,
)


@check(
    "R4-cuda-graph-replay-matches-eager",
    "MUST",
    "A CUDA graph captured on a dummy run's inputs_embeds (dummy_inputs_embeds(n), or with the hooks prepare_dummy_inputs) and replayed after a real step gives the eager forward's output.",
    kinds=("model_state",),
    needs_cuda=True,
)
def _graph_replay(run: CheckRun) -> None:
    step = prepare_real_step(run, _GRAPH_STEP)
    target = step.built.target
    ctx = step.built.ctx
    device = run.device
    n = step.batch.num_tokens_after_padding
    generator = torch.Generator().manual_seed(run.settings.seed)
    weight = (torch.randn(ctx.hidden_size, ctx.hidden_size, generator=generator) * 0.3).to(
        device, ctx.dtype
    )

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        return torch.tanh(embeds @ weight) + embeds

    warm_inputs = capture_inputs(run, target, n)
    warm = warm_inputs.tensor()
    if warm is None:
        raise CheckFailure(
            f"{warm_inputs.through} handed the model no inputs_embeds to capture on",
            expected=f"a tensor of shape ({n}, {ctx.hidden_size})",
            seen=type(warm_inputs.inputs_embeds).__name__,
        )
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # untyped in torch
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            forward(warm)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            captured_input = capture_inputs(run, target, n).tensor()
            if captured_input is None:
                raise TypeError(f"{warm_inputs.through} handed no inputs_embeds during capture")
            captured_output = forward(captured_input)
    except Exception as error:
        raise CheckFailure(
            "capturing a CUDA graph around a dummy run failed",
            expected=f"{warm_inputs.through} to be capturable (no allocation, no host sync)",
            seen=f"{type(error).__name__}: {error}",
        ) from error
    real = step.received(run)
    eager = forward(real)
    graph.replay()
    torch.cuda.synchronize(device)
    tol = run.settings.tolerance
    if not comparisons.allclose(
        captured_output.float(), eager.float(), rtol=tol.rtol, atol=tol.atol
    ):
        worst = float((captured_output.float() - eager.float()).abs().max())
        raise CheckFailure(
            "replaying the graph captured on a dummy run does not give the eager output",
            expected="the graph reads the buffer the real step wrote (same storage)",
            seen=f"outputs differ by up to {worst:.3g}",
        )
