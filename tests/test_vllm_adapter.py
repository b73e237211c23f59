"""The vLLM adapter: specs, supported releases, how it builds vLLM's classes, and that it
corrects nothing.

Tests that need vLLM run wherever it is importable (``.ci/vllm.sh`` runs them in an
environment made by ``tools/install_vllm_cpu.sh``) and skip elsewhere with a reason; the
others run everywhere, the missing-vLLM message only where vLLM is missing.
"""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rtmm_conformance import check_model_state
from rtmm_conformance.driving.context import ContextParts, Mode, build_context
from rtmm_conformance.reporting.xfail import parse_xfail_file
from rtmm_conformance.results import Outcome
from rtmm_conformance.settings import RunSettings
from rtmm_protocol.adapters.vllm import (
    SUPPORTED_RANGE,
    TESTED_VERSIONS,
    VllmFactory,
    VllmSpecError,
    VllmUnavailableError,
    installed_vllm_version,
    is_supported,
    load_target,
)
from rtmm_protocol.adapters.vllm.class_spec import parse_class_spec

VLLM = installed_vllm_version()
HAS_VLLM = importlib.util.find_spec("vllm") is not None and VLLM is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM,
    reason="vLLM is not installed (bash tools/install_vllm_cpu.sh VENV makes a CPU-only one)",
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEFAULT_STATE = "vllm.v1.worker.gpu.model_states.default:DefaultModelState"
ENCODER_RUNNER = "vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner"


def _context(mode: Mode) -> ContextParts:
    settings = RunSettings(
        torch.device("cpu"), seed=0, hidden_size=16, max_num_tokens=64, max_num_reqs=4
    )
    return build_context(mode, settings)


def _built(spec: str, parts: ContextParts) -> Any:
    """The target the adapter builds for ``spec`` (typed ``Any``: an object of vLLM's class)."""
    return load_target(spec).factory(parts.ctx)


def _outcomes(factory: VllmFactory, checks: list[str]) -> dict[str, set[Outcome]]:
    report = check_model_state(factory, device="cpu", examples=0, checks=checks, isolation="off")
    outcomes: dict[str, set[Outcome]] = {}
    for result in report.results:
        outcomes.setdefault(result.check_id, set()).add(result.outcome)
    return outcomes


# --- without vLLM --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["", "acme", "acme.state", "acme:", ":Cls", "acme/state.py:Cls", "a:b:c", "1acme:Cls"]
)
def test_a_spec_that_is_not_module_colon_class_is_refused_by_name(spec: str) -> None:
    with pytest.raises(VllmSpecError, match="MODULE:CLASS") as error:
        parse_class_spec(spec)
    assert repr(spec) in str(error.value)


def test_a_spec_keeps_module_and_nested_class_name() -> None:
    parsed = parse_class_spec("acme.states:Outer.Inner")
    assert (parsed.module, parsed.qualname, str(parsed)) == (
        "acme.states",
        "Outer.Inner",
        "acme.states:Outer.Inner",
    )


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("0.27.1", False),
        ("0.28.0", True),
        ("0.31.0", True),
        ("0.33.0", True),
        ("0.33.2.dev7+gabc", True),
        ("0.34.0", False),
        ("1.0.0", False),
        ("main", False),
    ],
)
def test_supported_releases(version: str, supported: bool) -> None:
    assert is_supported(version) is supported


def test_tested_releases_are_supported_ones() -> None:
    assert all(is_supported(v) for v in TESTED_VERSIONS)
    assert SUPPORTED_RANGE == ">=0.28.0,<0.34"


def test_importing_the_adapter_or_the_suite_imports_no_vllm() -> None:
    code = (
        "import sys\n"
        "import rtmm_protocol, rtmm_protocol.adapters.vllm\n"
        "import rtmm_conformance.plugin, rtmm_conformance.api\n"
        "loaded = [m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("example", ["vllm_encoder_runner", "vllm_model_state"])
@pytest.mark.parametrize("version", TESTED_VERSIONS)
def test_every_tested_release_has_a_known_gaps_file_per_level(example: str, version: str) -> None:
    gaps = parse_xfail_file(EXAMPLES / example / f"known-gaps-vllm-{version}.txt")
    assert gaps.entries, f"{example}: no entries for vLLM {version}"
    assert gaps.unknown() == [], [e.key for e in gaps.unknown()]


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here: the message is for its absence")
def test_without_vllm_the_error_says_what_to_install() -> None:
    with pytest.raises(VllmUnavailableError) as error:
        load_target(DEFAULT_STATE)
    message = str(error.value)
    assert "not installed" in message
    assert "rtmm-protocol[vllm]" in message
    assert "tools/install_vllm_cpu.sh" in message
    assert all(version in message for version in TESTED_VERSIONS)


# --- with vLLM -----------------------------------------------------------------------


@needs_vllm
def test_vllms_own_state_has_no_baseline_and_names_the_release() -> None:
    target = load_target(DEFAULT_STATE)
    assert target.baseline is None
    assert target.baseline_name == ""
    assert target.label == f"{DEFAULT_STATE} (vLLM {VLLM})"
    assert target.environment == {"vllm": VLLM}


@needs_vllm
def test_a_subclass_is_checked_next_to_the_vllm_class_it_derives_from() -> None:
    target = load_target("vllm_gallery:CopyingDummyState")
    assert target.baseline is not None
    assert str(target.baseline.spec) == DEFAULT_STATE
    assert target.baseline_name == f"vllm:{DEFAULT_STATE}"
    assert target.baseline.level == target.factory.level == "model_state"
    assert (
        target.label
        == f"vllm_gallery:CopyingDummyState (subclass of vLLM {VLLM} DefaultModelState)"
    )


@needs_vllm
def test_both_factories_pickle_by_reference() -> None:
    target = load_target("vllm_gallery:CopyingDummyState")
    assert target.baseline is not None
    for factory in (target.factory, target.baseline):
        data = pickle.dumps(factory)
        assert b"vllm_gallery" in data or b"model_states.default" in data
        assert pickle.loads(data) == factory


@needs_vllm
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rtmm_protocol.reference:ReferenceModelState", "derives from neither"),
        ("rtmm_protocol.adapters.vllm:load_target", "not a class"),
        ("vllm.v1.worker.gpu.model_states.default:NoSuchState", "has no attribute"),
        ("no_such_package.states:State", "cannot import module 'no_such_package.states'"),
    ],
)
def test_a_spec_naming_no_vllm_class_is_refused_by_name(spec: str, message: str) -> None:
    with pytest.raises(VllmSpecError, match=message) as error:
        load_target(spec)
    assert spec in str(error.value)


@needs_vllm
def test_a_model_state_is_built_as_the_model_runner_builds_it() -> None:
    parts = _context("realtime")
    state = _built(DEFAULT_STATE, parts)
    from vllm.v1.worker.gpu.model_states.default import (  # type: ignore[import-not-found, unused-ignore]
        DefaultModelState,
    )

    assert isinstance(state, DefaultModelState)
    assert type(state).__qualname__ == "DefaultModelState"
    assert state.hidden_size == parts.ctx.hidden_size == state.inputs_embeds_size
    assert state.max_num_tokens == parts.ctx.max_num_tokens
    assert state.is_realtime is True
    assert state.supports_mm_inputs is True
    # The cache vLLM reads is a view of the suite's: its outputs dict is the same object.
    assert state.encoder_cache.encoder_outputs is parts.ctx.encoder_cache.encoder_outputs


@needs_vllm
def test_a_text_only_model_gets_no_encoder_cache_as_in_vllm() -> None:
    state = _built(DEFAULT_STATE, _context("text-only"))
    assert state.supports_mm_inputs is False
    assert state.is_realtime is False


@needs_vllm
def test_get_mm_embeddings_is_vllms_own_step_under_the_contracts_name() -> None:
    state = _built(DEFAULT_STATE, _context("non-realtime"))
    method = type(state).get_mm_embeddings
    if hasattr(state, "prepare_inputs_embeds"):  # vLLM 0.29 and later
        assert method.__module__ == "rtmm_protocol.adapters.vllm.contract_names"
    else:  # vLLM 0.28: the contract's name is vLLM's
        assert method.__module__.startswith("vllm.")


@needs_vllm
def test_the_class_own_attributes_are_kept() -> None:
    parts = _context("non-realtime")
    state = _built("vllm_gallery:OwnHiddenSizeState", parts)
    assert state.hidden_size == parts.ctx.hidden_size + 1


@needs_vllm
def test_an_encoder_runner_is_checked_at_the_runner_level() -> None:
    target = load_target(ENCODER_RUNNER)
    runner = target.factory(_context("realtime").ctx)
    assert type(runner).__name__ == "EncoderRunner"
    assert target.factory.level == "encoder_runner"
    report = check_model_state(
        target.factory, device="cpu", examples=0, checks=["T1", "G2"], isolation="off"
    )
    assert report.kind == "gatherer"
    assert report.ok, report.table()


@needs_vllm
def test_vllms_deviations_show_through_the_adapter() -> None:
    """The adapter corrects nothing: vLLM's guard and its text-only state still show their
    robustness gaps (warnings, SHOULD), while its realtime class flag is read right."""
    outcomes = _outcomes(load_target(DEFAULT_STATE).factory, ["T3", "D1", "D2"])
    assert outcomes["T3-realtime-guard-semantics"] == {Outcome.WARNING}
    assert outcomes["T3-realtime-class-flag"] == {Outcome.PASSED}
    assert Outcome.WARNING in outcomes["D1-text-only-returns-none"]
    assert outcomes["D2-dummy-views-share-storage"] == {Outcome.PASSED}


@needs_vllm
def test_a_subclass_bug_fails_where_its_vllm_base_passes() -> None:
    """What the suite's own/inherited split rests on: the baseline runs the same checks."""
    target = load_target("vllm_gallery:CopyingDummyState")
    assert target.baseline is not None
    own = _outcomes(target.factory, ["D2-dummy-views-share-storage", "T3"])
    base = _outcomes(target.baseline, ["D2-dummy-views-share-storage", "T3"])
    assert Outcome.FAILED in own["D2-dummy-views-share-storage"]
    assert base["D2-dummy-views-share-storage"] == {Outcome.PASSED}
    assert (
        own["T3-realtime-guard-semantics"]
        == base["T3-realtime-guard-semantics"]
        == {Outcome.WARNING}
    )


@needs_vllm
def test_a_runner_subclass_bug_fails_where_vllms_runner_passes() -> None:
    target = load_target("vllm_gallery:PromptExtendingRunner")
    assert target.baseline is not None
    assert str(target.baseline.spec) == ENCODER_RUNNER
    own = _outcomes(target.factory, ["G9-inputs-unchanged"])
    base = _outcomes(target.baseline, ["G9-inputs-unchanged"])
    assert Outcome.FAILED in own["G9-inputs-unchanged"]
    assert base["G9-inputs-unchanged"] == {Outcome.PASSED}


@needs_vllm
def test_loading_a_target_raises_no_deprecation_warning() -> None:
    """vLLM's import-time DeprecationWarnings are silenced while, and only while, it imports."""
    code = (
        "import warnings\n"
        "from rtmm_protocol.adapters.vllm import load_target\n"
        f"load_target({DEFAULT_STATE!r})\n"
        "warnings.warn('after the import', DeprecationWarning)\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1
    assert "DeprecationWarning: after the import" in result.stderr
    assert result.stderr.count("DeprecationWarning") == 1, result.stderr
