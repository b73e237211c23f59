"""``python -m rtmm_protocol typecheck``: verdicts on the reference and on broken examples.

The command runs mypy (and pyright when installed) in a subprocess; each batch of classes
costs one run of each, so the classes are checked in two batches (all conforming, all
broken) shared by the tests. The command's own mypy cache lives in
``.mypy_cache/typecheck-cli-*`` (through ``RTMM_TYPECHECK_CACHE_DIR``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import typing_examples
from support.extras import needs_mypy

from rtmm_protocol.signatures import (
    SignatureProblem,
    check_gatherer_signature,
    check_model_state_signature,
)
from rtmm_protocol.typecheck import main
from rtmm_protocol.typecheck.cache import CACHE_DIR_ENV_VAR, typecheck_cache_dir
from rtmm_protocol.typecheck.static import find_pyright, write_check_module
from rtmm_protocol.typecheck.targets import batch_class_of, detect_protocol, load_target

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
EXAMPLES = "support.typing_examples"
REFERENCE = [
    "rtmm_protocol.reference.encoder_runner:EncoderRunner",
    "rtmm_protocol.reference.model_state:ReferenceModelState",
]
CONFORMING = [*REFERENCE, f"{EXAMPLES}:KeywordOnlyGatherer", f"{EXAMPLES}:TextOnlyState"]
BROKEN = [
    f"{EXAMPLES}:OldNameGatherer",
    f"{EXAMPLES}:LookaheadDefaultOneGatherer",
    f"{EXAMPLES}:NumpyDummyState",
    f"{EXAMPLES}:NoLookaheadDefaultState",
]
#: vLLM-shaped classes (written without vLLM): checked against VllmModelState.
VLLM_SHAPED = "support.vllm_typing_examples"
VLLM_SHAPED_CLASSES = [
    f"{VLLM_SHAPED}:EngineModelState",
    f"{VLLM_SHAPED}:EngineModelStateSubclass",
    f"{VLLM_SHAPED}:AnyBatchModelState",
    f"{VLLM_SHAPED}:EngineRunner",
    f"{VLLM_SHAPED}:MixedBatchModelState",
    f"{VLLM_SHAPED}:NoLookaheadDefaultModelState",
    f"{VLLM_SHAPED}:PreRenameEngineRunner",
]
HAS_PYRIGHT = find_pyright() is not None


@dataclass(frozen=True)
class Outcome:
    """Exit status and the printed report, split into one block of lines per class."""

    status: int
    stdout: str
    stderr: str

    def block(self, spec: str) -> list[str]:
        lines = self.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{spec}: "))
        end = start + 1
        while end < len(lines) and lines[end].startswith("  "):
            end += 1
        return lines[start:end]


@contextlib.contextmanager
def _invoked_from(directory: Path) -> Iterator[None]:
    """Run as if started in ``directory``, with a mypy cache kept under the repository."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        patch.setenv(CACHE_DIR_ENV_VAR, str(REPO / ".mypy_cache" / f"typecheck-cli-{worker}"))
        yield


def run(argv: Sequence[str], directory: Path = TESTS) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with _invoked_from(directory), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return Outcome(status, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def conforming() -> Outcome:
    return run(CONFORMING)


@pytest.fixture(scope="module")
def broken() -> Outcome:
    return run(BROKEN)


@pytest.fixture(scope="module")
def vllm_shaped() -> Outcome:
    return run(VLLM_SHAPED_CLASSES)


@needs_mypy
def test_reference_and_conforming_examples_pass(conforming: Outcome) -> None:
    assert conforming.status == 0, conforming.stdout
    checkers = "mypy and pyright" if HAS_PYRIGHT else "mypy"
    for spec in CONFORMING:
        assert conforming.block(spec) == [
            f"{spec}: matches {'ModelState' if 'State' in spec else 'MMEmbeddingGatherer'} "
            "(checked: its method signatures and attribute types, by the run-time signature "
            f"check and by {checkers} on a generated module)"
        ]
    assert "\n4 of 4 classes match their Protocol\n" in conforming.stdout


@needs_mypy
def test_broken_examples_fail_with_exit_status_1(broken: Outcome) -> None:
    assert broken.status == 1
    for spec in BROKEN:
        assert broken.block(spec)[0].endswith(
            ": does not match ModelState"
            if "State" in spec
            else ": does not match MMEmbeddingGatherer"
        )
    assert "\n0 of 4 classes match their Protocol\n" in broken.stdout


@needs_mypy
def test_old_argument_name_is_explained_by_every_check(broken: Outcome) -> None:
    block = "\n".join(broken.block(f"{EXAMPLES}:OldNameGatherer"))
    assert (
        "expected a parameter named num_computed_tokens (renamed from computed_prefill_lens)"
        in block
    )
    assert "mypy: Incompatible return value type" in block
    assert "computed_prefill_lens: IntArray, draft_lookahead: int = ...) -> tuple" in block
    if HAS_PYRIGHT:
        assert 'Missing keyword parameter "num_computed_tokens"' in block


@needs_mypy
def test_a_wrong_default_value_is_caught_at_run_time_only(broken: Outcome) -> None:
    block = broken.block(f"{EXAMPLES}:LookaheadDefaultOneGatherer")
    assert block[1:] == [
        "  run-time signature check:",
        "    - gather_mm_embeddings(draft_lookahead): expected a default of 0; found a default of 1",
    ]


@needs_mypy
def test_a_wrong_return_type_is_caught_by_the_type_checkers(broken: Outcome) -> None:
    block = broken.block(f"{EXAMPLES}:NumpyDummyState")
    assert not any("run-time" in line for line in block)
    details = [line for line in block if line.startswith("    - dummy_inputs_embeds: expected")]
    assert len(details) == 1
    assert "-> Tensor | None; found def dummy_inputs_embeds" in details[0]
    if HAS_PYRIGHT:
        assert any(line.startswith("  pyright: ") for line in block)


@needs_mypy
def test_a_dropped_default_is_caught_by_every_check(broken: Outcome) -> None:
    block = broken.block(f"{EXAMPLES}:NoLookaheadDefaultState")
    text = "\n".join(block)
    assert (
        "gather_mm_embeddings(draft_lookahead): expected a default of 0; found no default" in text
    )
    assert "draft_lookahead: int) -> tuple[list[Tensor], Tensor]" in text
    if HAS_PYRIGHT:
        assert 'Parameter "draft_lookahead" is missing default argument' in text


@needs_mypy
@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("OldNameGatherer", check_gatherer_signature),
        ("LookaheadDefaultOneGatherer", check_gatherer_signature),
        ("NumpyDummyState", check_model_state_signature),
        ("NoLookaheadDefaultState", check_model_state_signature),
    ],
)
def test_run_time_lines_are_the_signature_checks_verdict(
    broken: Outcome, name: str, check: Callable[[object], list[SignatureProblem]]
) -> None:
    # The command and the conformance suite share rtmm_protocol.signatures: same words.
    expected = [f"    - {problem}" for problem in check(getattr(typing_examples, name))]
    block = broken.block(f"{EXAMPLES}:{name}")
    start = block.index("  run-time signature check:") + 1 if expected else len(block)
    shown = [line for line in block[start:] if line.startswith("    - ")][: len(expected)]
    assert shown == expected


@needs_mypy
def test_protocol_option_overrides_detection() -> None:
    outcome = run(["--no-pyright", "--protocol", "ModelState", f"{EXAMPLES}:KeywordOnlyGatherer"])
    assert outcome.status == 1
    text = outcome.stdout
    assert f"{EXAMPLES}:KeywordOnlyGatherer: does not match ModelState" in text
    assert (
        "dummy_inputs_embeds: expected a method named dummy_inputs_embeds; found no such method"
        in text
    )
    assert "pyright: skipped (--no-pyright)" in text


@needs_mypy
def test_modules_in_the_invocation_directory_import(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mypy]\nstrict = true\nwarn_unreachable = true\npython_version = "3.10"\n'
    )
    (tmp_path / "local_runner.py").write_text(
        "from rtmm_protocol.reference import EncoderRunner\n\n\n"
        "class LocalRunner(EncoderRunner):\n"
        '    """A subclass living next to where the command runs."""\n'
    )
    outcome = run(["--no-pyright", "local_runner:LocalRunner"], directory=tmp_path)
    assert outcome.status == 0, outcome.stdout + outcome.stderr
    assert "local_runner:LocalRunner: matches MMEmbeddingGatherer" in outcome.stdout


@needs_mypy
def test_the_verdict_covers_the_class_not_its_module(tmp_path: Path) -> None:
    """A class matches while its module fails ``mypy --strict``: the verdict says only
    what it checked, and prints the commands that check the module itself."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mypy]\nstrict = true\nwarn_unreachable = true\npython_version = "3.10"\n'
    )
    (tmp_path / "sloppy_state.py").write_text(
        "from rtmm_protocol.reference import ReferenceModelState\n\n\n"
        "class SloppyState(ReferenceModelState):\n"
        '    """Matches ModelState; the helper below it has no annotations."""\n\n\n'
        "def scale(rows, factor):\n"
        "    return rows * factor\n"
    )
    outcome = run(["--no-pyright", "sloppy_state:SloppyState"], directory=tmp_path)
    # The premise: the command it prints for the module rejects the module.
    cache = REPO / ".mypy_cache" / f"typecheck-cli-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    strict = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--strict", "sloppy_state.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "[no-untyped-def]" in strict.stdout
    assert outcome.status == 0, outcome.stdout + outcome.stderr
    assert outcome.stdout.splitlines() == [
        "pyright: skipped (--no-pyright)",
        "sloppy_state:SloppyState: matches ModelState (checked: its method signatures and "
        "attribute types, by the run-time signature check and by mypy on a generated module)",
        "1 of 1 class matches its Protocol",
        "Not checked: the rest of each class's module, the bodies of its methods included "
        "(mypy and pyright report nothing from there in this run). Type-check the modules "
        "themselves, with your own configuration:",
        "  mypy --strict sloppy_state.py",
        "  pyright sloppy_state.py",
    ]
    assert "conform" not in outcome.stdout


@needs_mypy
def test_mypy_cache_is_kept_apart_from_the_projects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's mypy runs never write the project's .mypy_cache (a plain mypy run's)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "local_state.py").write_text(
        "from rtmm_protocol.reference import ReferenceModelState\n\n\n"
        "class LocalState(ReferenceModelState):\n"
        '    """A subclass living next to where the command runs."""\n'
    )
    cache = tmp_path / "own-cache"
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.chdir(project)
        patch.setenv(CACHE_DIR_ENV_VAR, str(cache))
        status = main(["--no-pyright", "local_state:LocalState"])
    assert status == 0
    assert not (project / ".mypy_cache").exists()
    # mypy keeps one folder per Python version it checks for (a SQLite or JSON cache).
    written = [path for path in cache.glob("3.*/*") if path.is_file()]
    assert written, "mypy wrote nothing to the command's own cache"


def test_cache_dir_is_per_project_under_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = typecheck_cache_dir(tmp_path / "one")
    second = typecheck_cache_dir(tmp_path / "two")
    assert first.parent == second.parent == tmp_path / "xdg" / "rtmm-protocol" / "typecheck"
    assert first.name.startswith("one-")
    assert first != second
    assert typecheck_cache_dir(tmp_path / "one") == first  # stable between runs
    monkeypatch.setenv(CACHE_DIR_ENV_VAR, str(tmp_path / "mine"))
    assert typecheck_cache_dir(tmp_path / "one") == tmp_path / "mine"


def test_missing_mypy_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed with [conformance] only, the command says which extra brings mypy."""
    find_spec = importlib.util.find_spec

    def without_mypy(name: str, package: str | None = None) -> object:
        return None if name == "mypy" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_mypy)
    outcome = run([f"{EXAMPLES}:TextOnlyState"])
    assert outcome.status == 2
    assert 'install the typecheck extra: pip install "rtmm-protocol[typecheck]"' in outcome.stderr


# ------------------------------------------------------------------ vLLM's spelling


def _matches(spec: str, protocol: str) -> str:
    checkers = "mypy and pyright" if HAS_PYRIGHT else "mypy"
    return (
        f"{spec}: matches {protocol} (checked: its method signatures and attribute types, by "
        f"the run-time signature check and by {checkers} on a generated module)"
    )


@needs_mypy
def test_vllm_shaped_states_match_vllm_model_state_of_their_batch(vllm_shaped: Outcome) -> None:
    """A class with prepare_inputs_embeds is checked against VllmModelState, parametrised
    with the batch class its methods take; a runner with vLLM's signature is a gatherer."""
    expected = {
        "EngineModelState": "VllmModelState[EngineBatch]",
        "EngineModelStateSubclass": "VllmModelState[EngineBatch]",
        "AnyBatchModelState": "VllmModelState[VllmInputBatch]",
        "EngineRunner": "MMEmbeddingGatherer",
    }
    for name, protocol in expected.items():
        spec = f"{VLLM_SHAPED}:{name}"
        assert vllm_shaped.block(spec) == [_matches(spec, protocol)]
    assert vllm_shaped.status == 1
    assert "\n4 of 7 classes match their Protocol\n" in vllm_shaped.stdout


@needs_mypy
def test_a_method_narrowing_the_batch_class_is_rejected(vllm_shaped: Outcome) -> None:
    """The widest batch class among the methods' is the parameter, so the method that asks
    for a narrower one is the finding (the run-time check reads no types)."""
    block = vllm_shaped.block(f"{VLLM_SHAPED}:MixedBatchModelState")
    assert block[0].endswith(": does not match VllmModelState[EngineBatch]")
    text = "\n".join(block)
    assert "run-time" not in text
    assert (
        "prepare_inputs: expected def prepare_inputs(self, input_batch: EngineBatch, "
        "req_states: Any) -> dict[str, Any]; found def prepare_inputs(self, input_batch: "
        "OtherBatch" in text
    )
    if HAS_PYRIGHT:
        assert any(line.startswith("  pyright: ") for line in block)


@needs_mypy
def test_a_vllm_shaped_state_without_the_lookahead_default_fails_every_check(
    vllm_shaped: Outcome,
) -> None:
    block = vllm_shaped.block(f"{VLLM_SHAPED}:NoLookaheadDefaultModelState")
    text = "\n".join(block)
    assert block[0].endswith(": does not match VllmModelState[EngineBatch]")
    assert (
        "gather_mm_embeddings(draft_lookahead): expected a default of 0; found no default" in text
    )
    assert "mypy: Incompatible return value type" in text
    if HAS_PYRIGHT:
        assert 'Parameter "draft_lookahead" is missing default argument' in text


@needs_mypy
def test_vllm_0_24_runner_signature_is_rejected_by_every_check(vllm_shaped: Outcome) -> None:
    """vLLM 0.24.0's runner kept computed_prefill_lens: mypy rejects it too (SPEC T2)."""
    block = vllm_shaped.block(f"{VLLM_SHAPED}:PreRenameEngineRunner")
    text = "\n".join(block)
    assert block[0].endswith(": does not match MMEmbeddingGatherer")
    assert "(renamed from computed_prefill_lens)" in text
    assert "mypy: Incompatible return value type" in text
    assert "computed_prefill_lens: ndarray[tuple[Any, ...], dtype[Any]]" in text
    if HAS_PYRIGHT:
        assert 'Missing keyword parameter "num_computed_tokens"' in text


@needs_mypy
def test_vllm_0_28_merge_name_is_reported_missing_under_the_forced_protocol() -> None:
    spec = f"{VLLM_SHAPED}:PreRenameModelState"
    outcome = run(["--no-pyright", "--protocol", "VllmModelState", spec])
    assert outcome.status == 1
    assert outcome.block(spec) == [
        f"{spec}: does not match VllmModelState[EngineBatch]",
        "  run-time signature check:",
        "    - prepare_inputs_embeds: expected a method named prepare_inputs_embeds; "
        "found no such method",
        '  mypy: Incompatible return value type (got "PreRenameModelState", expected '
        '"VllmModelState[EngineBatch]") [return-value]',
        "    - missing members: prepare_inputs_embeds",
    ]


HIDDEN_BATCH_STATE = '''\
"""A vLLM-shaped state whose batch class is imported for the type checkers only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from support.vllm_typing_examples import EngineBatch


class HiddenBatchState:
    def __init__(self) -> None:
        self.supports_mm_inputs = False
        self.inputs_embeds_size = 8
        self.max_num_tokens = 16
        self.device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: EngineBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def prepare_inputs_embeds(
        self, scheduled_encoder_inputs: dict[str, list[int]], input_batch: EngineBatch, req_states: Any
    ) -> torch.Tensor | None:
        return None

    def prepare_inputs(self, input_batch: EngineBatch, req_states: Any) -> dict[str, Any]:
        return {}

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        return {}
'''


@needs_mypy
def test_an_unresolvable_batch_annotation_is_checked_as_any_and_said(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mypy]\nstrict = true\nwarn_unreachable = true\npython_version = "3.10"\n'
    )
    (tmp_path / "hidden_batch_state.py").write_text(HIDDEN_BATCH_STATE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TESTS))
        patch.setenv("MYPYPATH", str(TESTS))
        outcome = run(["--no-pyright", "hidden_batch_state:HiddenBatchState"], directory=tmp_path)
    lines = outcome.stdout.splitlines()
    assert lines[1].startswith("hidden_batch_state:HiddenBatchState: matches VllmModelState[Any]")
    assert lines[2] == (
        "  note: no method of the class names its batch class in an annotation that resolves "
        "at run time, so its batch parameters were checked as Any"
    )
    assert outcome.status == 0, outcome.stdout


def test_detection_picks_vllm_model_state_for_prepare_inputs_embeds() -> None:
    from support import vllm_typing_examples as shaped

    assert detect_protocol(shaped.EngineModelState) == "VllmModelState"
    assert detect_protocol(shaped.EngineModelStateSubclass) == "VllmModelState"
    assert detect_protocol(shaped.EngineRunner) == "MMEmbeddingGatherer"
    assert detect_protocol(shaped.PreRenameEngineRunner) == "MMEmbeddingGatherer"
    # vLLM 0.28's spelling has no prepare_inputs_embeds: judged as a ModelState.
    assert detect_protocol(shaped.PreRenameModelState) == "ModelState"
    assert detect_protocol(typing_examples.TextOnlyState) == "ModelState"


def test_the_batch_class_is_the_widest_its_methods_take() -> None:
    from support import vllm_typing_examples as shaped

    engine_batch = (VLLM_SHAPED, "EngineBatch")
    assert batch_class_of(shaped.EngineModelState) == engine_batch
    assert batch_class_of(shaped.MixedBatchModelState) == engine_batch
    assert batch_class_of(shaped.AnyBatchModelState) == (
        "rtmm_protocol.vllm_protocols",
        "VllmInputBatch",
    )
    assert batch_class_of(shaped.EngineRunner) is None

    class Local:
        """A batch class defined in a function cannot be imported by the checkers."""

    class LocalBatchState:
        def prepare_inputs(self, input_batch: Local, req_states: object) -> dict[str, object]:
            return {}

    assert batch_class_of(LocalBatchState) is None


def test_the_generated_module_parametrises_generic_protocols(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TESTS))
        state = load_target(f"{VLLM_SHAPED}:EngineModelState", None)
        runner = load_target(f"{VLLM_SHAPED}:EngineRunner", None)
        forced = load_target(f"{EXAMPLES}:NeitherStateNorGatherer", "VllmModelState")
    assert (state.label, runner.label, forced.label) == (
        "VllmModelState[EngineBatch]",
        "MMEmbeddingGatherer",
        "VllmModelState[Any]",
    )
    module = write_check_module([state, runner, forced], tmp_path)
    text = module.path.read_text()
    assert "from rtmm_protocol import MMEmbeddingGatherer, VllmModelState\n" in text
    assert f"import {VLLM_SHAPED} as batch_module_0\n" in text
    assert "-> VllmModelState[batch_module_0.EngineBatch]:\n" in text
    assert "-> VllmModelState[Any]:\n" in text
    # Every line of a target's block is owned by it, the batch import included.
    lines = text.splitlines()
    owned = {number for number, index in module.owners.items() if index == 0}
    assert {n for n, line in enumerate(lines, 1) if "_0" in line} <= owned


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: MODULE:CLASS"),
        (["no_colon"], "'no_colon' is not of the form MODULE:CLASS"),
        (["pkg:"], "'pkg:' is not of the form MODULE:CLASS"),
        (["no_such_module_here:X"], "cannot import module 'no_such_module_here'"),
        ([f"{EXAMPLES}:Missing"], f"module '{EXAMPLES}' has no attribute 'Missing'"),
        ([f"{EXAMPLES}:torch"], "is a module, not a class"),
        (
            [f"{EXAMPLES}:NeitherStateNorGatherer"],
            "pass --protocol (ModelState, MMEmbeddingGatherer or VllmModelState)",
        ),
        (["--protocol", "Model", f"{EXAMPLES}:TextOnlyState"], "invalid choice: 'Model'"),
    ],
)
def test_usage_errors_exit_2_with_a_message(argv: list[str], message: str) -> None:
    outcome = run(argv)
    assert outcome.status == 2
    assert message in outcome.stderr
    assert outcome.stdout == ""


def test_help_exits_0() -> None:
    outcome = run(["--help"])
    assert outcome.status == 0
    assert "MODULE:CLASS" in outcome.stdout
