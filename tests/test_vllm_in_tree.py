"""vLLM's own model states, by name: the adapter knows every one, builds each as vLLM does,
and builds a user's subclass that reads its checkpoint's configuration (SPEC M1-M3).

Runs only where vLLM is importable (``.ci/vllm.sh`` installs each tested release); the
verdict of each state at the suite's defaults is the committed report's
(``tests/test_engine_reports.py`` holds them to the contract, and ``.ci/vllm.sh`` reruns
them with ``examples/engine_reports/refresh.py --check``). Here the hand-placed cases
alone run, in this process.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_vllm_adapter import VLLM, needs_vllm

from rtmm_conformance import check_model_state
from rtmm_conformance.driving.context import Mode, build_context
from rtmm_conformance.results import Outcome
from rtmm_conformance.settings import RunSettings
from rtmm_protocol.adapters.vllm import VllmSpecError, load_target
from rtmm_protocol.adapters.vllm.engine import VLLM_ENGINE
from rtmm_protocol.adapters.vllm.in_tree import IN_TREE_STATES, InTreeState

REPO = Path(__file__).resolve().parents[1]
OWN_STATE = REPO / "examples" / "vllm_own_state"
#: The release whose model states the adapter's list is written from.
LISTED_RELEASE = "0.33.0"


def _model_states_in(package: Path) -> set[str]:
    """``module:Class`` of every class in vLLM's sources that derives, at any depth, from
    vLLM's abstract ``ModelState`` (read from the source: nothing is imported)."""
    classes: dict[str, tuple[str, list[str]]] = {}  # name -> (module, base names)
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "ModelState" not in text:
            continue
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                bases = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                classes[f"{module}:{node.name}"] = (node.name, bases)
    found: set[str] = set()
    names = {"ModelState"}
    while True:
        more = {
            spec
            for spec, (_, bases) in classes.items()
            if spec not in found and set(bases) & names and not spec.endswith(":ModelState")
        }
        if not more:
            return found
        found |= more
        names |= {classes[spec][0] for spec in more}


def _vllm_package() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).parent


@needs_vllm
def test_the_adapter_knows_every_model_state_vllm_ships() -> None:
    """Every subclass of vLLM's ``ModelState`` in the installed release is one the adapter
    lists (with its configuration, or why it cannot be built); the list is the newest
    tested release's, so an older one may lack some."""
    shipped = _model_states_in(_vllm_package())
    listed = {state.spec for state in IN_TREE_STATES}
    assert shipped <= listed, f"not listed: {sorted(shipped - listed)}"
    if VLLM == LISTED_RELEASE:
        assert shipped == listed, f"listed but not in vLLM {VLLM}: {sorted(listed - shipped)}"


def _shipped() -> Iterator[InTreeState]:
    for state in IN_TREE_STATES:
        if not state.not_buildable:
            yield state


def _load(state: InTreeState) -> None:
    """Skip where the installed release has no such state, or lacks a package it imports."""
    module = state.spec.partition(":")[0]
    source = _vllm_package().parent / Path(*module.split(".")).with_suffix(".py")
    if not source.is_file():
        pytest.skip(f"vLLM {VLLM} has no {module}")
    try:
        load_target(state.spec)
    except VllmSpecError as error:
        if state.packages and "not installed here" in str(error):
            pytest.skip(f"{state.name} needs {', '.join(state.packages)}: {error}")
        raise


@needs_vllm
@pytest.mark.parametrize("state", list(_shipped()), ids=lambda s: s.key)
def test_each_state_is_built_by_name_and_hands_its_model_what_the_list_says(
    state: InTreeState,
) -> None:
    """Built by its name alone, around a toy model carrying the configuration the adapter
    carries for it: a cross-attention state hands its model no ``inputs_embeds``; any
    other hands it the encoder runner's buffer in a capture, or one of its own, as listed."""
    _load(state)
    target = load_target(state.spec)
    mode: Mode = "text-only" if state.models == "text" else "non-realtime"
    settings = RunSettings(device="cpu", model_config=target.configuration)
    parts = build_context(mode, settings, config_class=VLLM_ENGINE.config_class)
    built = target.factory(parts.ctx)
    captured = built.prepare_dummy_inputs(1, 1).get("inputs_embeds")  # type: ignore[attr-defined]
    if state.hands == "cross-attention":
        assert captured is None
        assert built.dummy_inputs_embeds(1) is None  # type: ignore[attr-defined]
        return
    runner = built.encoder_runner.inputs_embeds if state.models == "multimodal" else None  # type: ignore[attr-defined]
    assert captured is not None
    shares = runner is not None and (
        captured.untyped_storage().data_ptr() == runner.untyped_storage().data_ptr()
    )
    assert shares == (state.hands == "runner"), state.hands


@needs_vllm
@pytest.mark.parametrize("state", list(_shipped()), ids=lambda s: s.key)
def test_each_state_passes_the_contract_on_the_hand_placed_cases(state: InTreeState) -> None:
    """No contract check fails or is blocked (a state whose models take token ids alone is
    not judged around a multimodal model, and says so)."""
    _load(state)
    report = check_model_state(f"vllm:{state.spec}", device="cpu", examples=0, isolation="off")
    counts = report.counts("contract")
    assert counts["failed_must"] == counts["failed_should"] == counts["blocked"] == 0, (
        report.table()
    )
    if state.models == "text":
        assert report.kind is None
        assert {r.outcome for r in report.results} == {Outcome.SKIPPED}
    else:
        assert counts["passed"] > 0, report.table()


@pytest.fixture
def own_state_folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example's folder, on the path and the working directory (as its page runs it)."""
    monkeypatch.syspath_prepend(str(OWN_STATE))
    monkeypatch.chdir(OWN_STATE)
    yield OWN_STATE
    sys.modules.pop("replay_state", None)


@needs_vllm
def test_a_users_state_is_built_with_the_configuration_they_name(own_state_folder: Path) -> None:
    """A subclass of DeepSeek V4.1's state that reads a value of its checkpoint's
    configuration: without that configuration T1 fails, naming the value, the line that
    read it and the option; with it, the state fails no contract check of its own."""
    if not (_vllm_package() / "models" / "deepseek_v41").is_dir():
        pytest.skip(f"vLLM {VLLM} has no DeepSeek V4.1 state (it arrived after this release)")
    name = "vllm:replay_state:ReplayWindowState"
    missing = check_model_state(name, device="cpu", examples=0, isolation="off")
    t1 = [r for r in missing.results if r.check_id == "T1-factory-builds"]
    assert t1
    assert all(r.outcome is Outcome.FAILED for r in t1)
    details = t1[0].details
    assert "replay_window" in details
    assert "replay_state.py:" in details
    assert "--conformance-model-config=PATH" in details
    config = own_state_folder / "checkpoint" / "config.json"
    report = check_model_state(name, device="cpu", examples=0, isolation="off", model_config=config)
    counts = report.counts("contract")
    assert counts["failed_must"] == counts["blocked"] == counts["failed_own"] == 0, report.table()
    assert counts["passed"] > 0
    assert str(report.settings["model_config"]).startswith(str(config))
