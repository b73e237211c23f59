"""A state that reads its model when it is built (SPEC M3), and a step that needs what the
machine lacks, without an engine: the run's configuration reaches the state, T1 says what
a state read that the run did not give, and a check whose step needs a missing module is
skipped, naming it, only when the module is truly missing."""

from __future__ import annotations

from typing import Any

import torch

from rtmm_conformance import ConformanceContext, check_model_state
from rtmm_conformance.results import Outcome
from rtmm_protocol.reference import ReferenceModelState


def _reference(ctx: ConformanceContext, hidden_size: int | None = None) -> ReferenceModelState:
    return ReferenceModelState(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size if hidden_size is None else hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
    )


def reads_its_config(ctx: ConformanceContext) -> ReferenceModelState:
    """A state sized from its model's configuration, as vLLM's are."""
    config: Any = ctx.model.config  # type: ignore[union-attr]
    state = _reference(ctx, hidden_size=int(config.hidden_size))
    state.num_experts = int(config.num_experts)  # type: ignore[attr-defined]
    return state


def reads_an_attribute(ctx: ConformanceContext) -> ReferenceModelState:
    state = _reference(ctx)
    state.lookback = int(ctx.model.token_lookback_depth)  # type: ignore[union-attr, attr-defined]
    return state


def _t1(report: Any) -> list[Any]:
    return [r for r in report.results if r.check_id == "T1-factory-builds"]


def test_t1_names_the_value_the_state_read_its_line_and_the_option() -> None:
    report = check_model_state(
        reads_its_config, checks=["T1-factory-builds"], device="cpu", isolation="off"
    )
    details = _t1(report)[0].details
    assert _t1(report)[0].outcome is Outcome.FAILED
    assert "The state read model.config.num_experts at " in details
    assert "test_model_reads.py:" in details
    assert "(in reads_its_config)" in details
    assert "--conformance-model-config=PATH" in details
    attribute = check_model_state(
        reads_an_attribute, checks=["T1-factory-builds"], device="cpu", isolation="off"
    )
    details = _t1(attribute)[0].details
    assert "The state read model.token_lookback_depth at " in details
    assert "--conformance-model-attr token_lookback_depth=VALUE" in details


def test_the_named_configuration_reaches_the_state_sized_as_the_suite_sizes_it() -> None:
    """The checkpoint's hidden size is the suite's, so the state built from it conforms."""
    checkpoint = {"model_type": "acme", "hidden_size": 4096, "num_experts": 8}
    report = check_model_state(
        reads_its_config,
        checks=["T1", "D1", "G5"],
        device="cpu",
        examples=2,
        isolation="off",
        model_config=checkpoint,
    )
    assert report.ok, report.table()
    assert {r.outcome for r in report.results} == {Outcome.PASSED}
    assert report.settings["model_config"] == "a mapping of configuration values"
    attribute = check_model_state(
        reads_an_attribute,
        checks=["T1"],
        device="cpu",
        isolation="off",
        model_attrs=["token_lookback_depth=3"],
    )
    assert attribute.ok, attribute.table()
    assert attribute.settings["model_attrs"] == {"token_lookback_depth": 3}


class _NeedsAModule(ReferenceModelState):
    """A state whose real step imports a module (``MODULE``) that may not be installed."""

    MODULE = "rtmm_kernels_that_are_not_installed"

    def get_mm_embeddings(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        __import__(self.MODULE)
        return super().get_mm_embeddings(*args, **kwargs)


class _ClaimsAMissingModule(_NeedsAModule):
    """A state that raises as if ``json`` were missing: it is installed, so no skip."""

    def get_mm_embeddings(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        raise ModuleNotFoundError("No module named 'json'", name="json")


def needs_a_module(ctx: ConformanceContext) -> ReferenceModelState:
    return _NeedsAModule(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
    )


def claims_a_missing_module(ctx: ConformanceContext) -> ReferenceModelState:
    return _ClaimsAMissingModule(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
    )


def test_a_step_that_needs_a_missing_module_is_skipped_naming_it_and_its_line() -> None:
    report = check_model_state(
        needs_a_module, checks=["R2", "G5"], device="cpu", examples=1, isolation="off"
    )
    outcomes = {r.check_id: r for r in report.results if r.mode == "realtime"}
    skipped = outcomes["R2-returns-padded-buffer-slice"]
    assert skipped.outcome is Outcome.SKIPPED
    assert f"the module '{_NeedsAModule.MODULE}', which is not installed here" in skipped.reason
    assert "test_model_reads.py:" in skipped.reason
    assert outcomes["G5-rows-match-mask"].outcome is Outcome.PASSED  # no import on its path


def test_a_skip_is_no_way_out_for_a_module_that_is_installed() -> None:
    report = check_model_state(
        claims_a_missing_module,
        checks=["R2-returns-padded-buffer-slice"],
        device="cpu",
        examples=0,
        isolation="off",
    )
    assert {r.outcome for r in report.results} == {Outcome.FAILED}, report.table()
