"""vLLM's own classes against the contract in vLLM's spelling: mypy --strict, pyright, the
``typecheck`` command and the run-time signature check, and the typing page's vLLM run.

- ``tests/typing/vllm_classes/*.py`` assign vLLM's classes to the Protocols:
  ``DefaultModelState`` to ``VllmModelState[InputBatch]`` (and not to
  ``VllmModelState[VllmInputBatch]``: its methods take vLLM's ``InputBatch``, not any
  batch), ``EncoderRunner`` to ``MMEmbeddingGatherer``, vLLM's ``InputBatch`` to both batch
  Protocols, and vLLM 0.33's in-tree states. mypy ``--strict`` and pyright must report
  exactly the findings their ``# E:`` / ``# P:`` comments announce, as in
  ``tests/test_typing_cases.py``. Each file says which vLLM releases it is for; under
  another it is skipped with the reason.
- ``python -m rtmm_protocol typecheck`` reports ``1 of 1 class matches its Protocol`` on
  vLLM's ``DefaultModelState``, on a subclass of it (``tests/vllm_typing_subclass.py``)
  and on vLLM's ``EncoderRunner``.
- The typing page's ``mypy --strict my_vllm_state.py`` output is what mypy prints today,
  with the release of vLLM the page names.

Everything here needs vLLM (skipped with a reason where it is not installed, as in
``tests/test_vllm_adapter.py``); the type-checker runs need mypy (the typecheck extra) and,
for pyright's verdicts, pyright. vLLM 0.28 spells ``prepare_inputs_embeds`` as
``get_mm_embeddings`` (0.29 renamed it), so what concerns ``VllmModelState`` skips there.
The mypy runs share one cache, ``.mypy_cache/vllm-typing``, and run from an empty folder,
so that no configuration but ``--strict`` applies, as on the typing page.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from docs_pages import DOCS, CodeBlock, code_blocks
from support.extras import needs_mypy
from test_vllm_adapter import DEFAULT_STATE, ENCODER_RUNNER, HAS_VLLM, VLLM, needs_vllm

from rtmm_conformance.driving.context import build_context
from rtmm_conformance.settings import RunSettings
from rtmm_protocol import InputBatch, ModelInputsHooks, VllmInputBatch, VllmModelState
from rtmm_protocol.adapters.vllm import load_target
from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.signatures import check_gatherer_signature, check_vllm_model_state_signature
from rtmm_protocol.typecheck import main as typecheck_main
from rtmm_protocol.typecheck.cache import CACHE_DIR_ENV_VAR
from rtmm_protocol.typecheck.static import find_pyright
from rtmm_protocol.typecheck.targets import batch_class_of, detect_protocol

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
CASES = TESTS / "typing" / "vllm_classes"
MYPY_CACHE = REPO / ".mypy_cache" / "vllm-typing"
SUBCLASS = "vllm_typing_subclass:OwnBufferState"
INPUT_BATCH = ("vllm.v1.worker.gpu.input_batch", "InputBatch")
#: The release of vLLM whose types the typing page's mypy output shows.
PAGE_RELEASE = "0.33.0"

_EXPECTATION = re.compile(r"#\s*([EP]):\s*([\w-]+(?:\s*,\s*[\w-]+)*)")


def _release(version: str | None) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


RELEASE = _release(VLLM)
#: vLLM 0.29 renamed get_mm_embeddings to prepare_inputs_embeds: VllmModelState's spelling.
HAS_VLLM_SPELLING = HAS_VLLM and RELEASE >= (0, 29)
OLD_SPELLING = (
    f"vLLM {VLLM} spells prepare_inputs_embeds get_mm_embeddings (0.29 renamed it); "
    "VllmModelState is the contract in the spelling of vLLM 0.29 and later"
)
needs_vllm_spelling = pytest.mark.skipif(HAS_VLLM and not HAS_VLLM_SPELLING, reason=OLD_SPELLING)

#: Each case file and the releases it is for (a reason to skip where it is not).
CASE_RELEASES: dict[str, Callable[[tuple[int, int]], str | None]] = {
    "vllm_runner_and_batch.py": lambda release: None,
    "vllm_model_states.py": lambda release: None if release >= (0, 29) else OLD_SPELLING,
    "vllm_0_33_in_tree_states.py": lambda release: (
        None if release == (0, 33) else f"vLLM 0.33's in-tree states; this is vLLM {VLLM}"
    ),
}
CASE_FILES = sorted(CASES.glob("*.py"))


@pytest.fixture(scope="module", autouse=True)
def _vllm_imported_quietly() -> None:
    """Import vLLM's modules once, without their import-time DeprecationWarnings, before
    the tests and the typecheck command import them by name."""
    if HAS_VLLM:
        for spec in (DEFAULT_STATE, ENCODER_RUNNER):
            import_vllm(spec.partition(":")[0])


def _applicable() -> list[Path]:
    return [path for path in CASE_FILES if CASE_RELEASES[path.name](RELEASE) is None]


# ------------------------------------------------------------------ mypy and pyright


def _findings_by_file(lines: list[tuple[str, int, str]]) -> dict[str, Counter[tuple[int, str]]]:
    found: dict[str, Counter[tuple[int, str]]] = {}
    for file, line, code in lines:
        found.setdefault(Path(file).name, Counter())[line, code] += 1
    return found


@pytest.fixture(scope="module")
def mypy_strict(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Counter[tuple[int, str]]]:
    """mypy --strict's errors on the applicable case files, by file name."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(MYPY_CACHE),
            "--output",
            "json",
            *(str(path) for path in _applicable()),
        ],
        cwd=tmp_path_factory.mktemp("mypy-strict"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return _findings_by_file(
        [(r["file"], r["line"], r["code"] or "") for r in records if r["severity"] == "error"]
    )


@pytest.fixture(scope="module")
def pyright_verdicts(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Counter[tuple[int, str]]]:
    """pyright's errors on the applicable case files, by file name."""
    executable = find_pyright()
    if executable is None:
        pytest.skip("pyright is not installed (it comes with the typecheck extra)")
    done = subprocess.run(
        [
            executable,
            "--outputjson",
            "--pythonpath",
            sys.executable,
            *(str(path) for path in _applicable()),
        ],
        cwd=tmp_path_factory.mktemp("pyright"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(done.stdout)
    return _findings_by_file(
        [
            (item["file"], item["range"]["start"]["line"] + 1, item.get("rule", ""))
            for item in report["generalDiagnostics"]
            if item["severity"] == "error"
        ]
    )


def _expected(path: Path, marker: str) -> Counter[tuple[int, str]]:
    expected: Counter[tuple[int, str]] = Counter()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        for found, codes in _EXPECTATION.findall(text):
            if found == marker:
                expected.update((number, code.strip()) for code in codes.split(","))
    return expected


def _skip_unless_applicable(path: Path) -> None:
    reason = CASE_RELEASES[path.name](RELEASE)
    if reason is not None:
        pytest.skip(reason)


@needs_vllm
@needs_mypy
@pytest.mark.slow  # mypy --strict over vLLM's modules (a minute with an empty cache)
@pytest.mark.parametrize("path", CASE_FILES, ids=lambda path: path.name)
def test_mypy_strict_findings_match_the_expected_ones(
    path: Path, request: pytest.FixtureRequest
) -> None:
    _skip_unless_applicable(path)
    findings: dict[str, Counter[tuple[int, str]]] = request.getfixturevalue("mypy_strict")
    assert findings.get(path.name, Counter()) == _expected(path, "E")


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("path", CASE_FILES, ids=lambda path: path.name)
def test_pyright_findings_match_the_expected_ones(
    path: Path, request: pytest.FixtureRequest
) -> None:
    _skip_unless_applicable(path)
    findings: dict[str, Counter[tuple[int, str]]] = request.getfixturevalue("pyright_verdicts")
    assert findings.get(path.name, Counter()) == _expected(path, "P")


def test_every_case_file_names_its_releases() -> None:
    assert {path.name for path in CASE_FILES} == set(CASE_RELEASES)
    for path in CASE_FILES:
        assert path.read_text().startswith('"""vLLM'), f"{path.name}: no docstring"


# ------------------------------------------------------------------ the typecheck command


def _typecheck(spec: str) -> tuple[int, list[str]]:
    """Run the command on one class from the tests' folder (where the subclass lives)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(TESTS)
        patch.setenv(CACHE_DIR_ENV_VAR, str(REPO / ".mypy_cache" / f"typecheck-cli-{worker}"))
        with contextlib.redirect_stdout(out):
            status = typecheck_main([spec])
    return status, out.getvalue().splitlines()


def _verdict(spec: str, protocol: str) -> str:
    checkers = "mypy and pyright" if find_pyright() is not None else "mypy"
    return (
        f"{spec}: matches {protocol} (checked: its method signatures and attribute types, by "
        f"the run-time signature check and by {checkers} on a generated module)"
    )


@needs_vllm
@needs_mypy
@pytest.mark.slow  # a mypy and a pyright run over vLLM's modules each
@pytest.mark.parametrize(
    ("spec", "protocol", "needs_spelling"),
    [
        (DEFAULT_STATE, "VllmModelState[InputBatch]", True),
        (SUBCLASS, "VllmModelState[InputBatch]", True),
        (ENCODER_RUNNER, "MMEmbeddingGatherer", False),
    ],
    ids=["DefaultModelState", "subclass", "EncoderRunner"],
)
def test_typecheck_reports_vllms_classes_matching(
    spec: str, protocol: str, needs_spelling: bool
) -> None:
    if needs_spelling and not HAS_VLLM_SPELLING:
        pytest.skip(OLD_SPELLING)
    status, lines = _typecheck(spec)
    assert status == 0, "\n".join(lines)
    verdicts = [line for line in lines if line.startswith(f"{spec}: ")]
    assert verdicts == [_verdict(spec, protocol)]
    assert "1 of 1 class matches its Protocol" in lines


# ------------------------------------------------------------------ at run time


@needs_vllm
@needs_vllm_spelling
@pytest.mark.parametrize("spec", [DEFAULT_STATE, SUBCLASS])
def test_vllm_states_are_judged_as_vllm_model_states_of_vllms_batch(spec: str) -> None:
    module, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert detect_protocol(cls) == "VllmModelState"
    assert batch_class_of(cls) == INPUT_BATCH
    assert check_vllm_model_state_signature(cls) == []


@needs_vllm
def test_vllms_runner_passes_the_run_time_signature_check() -> None:
    EncoderRunner = import_vllm(ENCODER_RUNNER.partition(":")[0]).EncoderRunner  # noqa: N806
    assert detect_protocol(EncoderRunner) == "MMEmbeddingGatherer"
    assert check_gatherer_signature(EncoderRunner) == []


@needs_vllm
def test_vllms_dummy_batch_is_a_vllm_input_batch() -> None:
    module = import_vllm(INPUT_BATCH[0])
    batch = module.InputBatch.make_dummy(2, 8, module.InputBuffers(4, 16, torch.device("cpu")))
    assert isinstance(batch, VllmInputBatch)
    assert isinstance(batch, InputBatch)


@needs_vllm
@needs_vllm_spelling
def test_a_built_default_model_state_is_a_vllm_model_state() -> None:
    settings = RunSettings(
        torch.device("cpu"), seed=0, hidden_size=16, max_num_tokens=64, max_num_reqs=4
    )
    state = load_target(DEFAULT_STATE).factory(build_context("realtime", settings).ctx)
    assert isinstance(state, VllmModelState)
    assert isinstance(state, ModelInputsHooks)
    assert check_vllm_model_state_signature(state) == []


# ------------------------------------------------------------------ the typing page


def _page_block(title: str) -> CodeBlock:
    blocks = [block for block in code_blocks(DOCS / "typing.md") if block.title == title]
    assert len(blocks) == 1, f"docs/typing.md has {len(blocks)} blocks titled {title!r}"
    return blocks[0]


def test_the_typing_page_shows_a_vllm_authors_mypy_run() -> None:
    """The page's vLLM example and its mypy output exist, whatever is installed here, and
    the example says why the docs tests do not run it."""
    example = _page_block("my_vllm_state.py")
    assert example.skip_reason is not None
    assert "tests/test_vllm_typing.py" in example.skip_reason
    shown = _page_block("mypy --strict my_vllm_state.py")
    assert shown.code.splitlines()[-1].startswith("Found ")
    assert f"vLLM {PAGE_RELEASE}" in (DOCS / "typing.md").read_text("utf-8")


@needs_vllm
@needs_mypy
@pytest.mark.slow  # mypy --strict over vLLM's modules (shares the case files' cache)
@pytest.mark.skipif(
    HAS_VLLM and VLLM != PAGE_RELEASE, reason=f"the page shows vLLM {PAGE_RELEASE}'s types"
)
def test_the_typing_pages_mypy_output_is_a_real_runs(tmp_path: Path) -> None:
    example = _page_block("my_vllm_state.py")
    shown = _page_block("mypy --strict my_vllm_state.py")
    # The first line is the docs tests' skip marker, which the site does not show.
    code = example.code.split("\n", 1)[1]
    (tmp_path / "my_vllm_state.py").write_text(code + "\n", "utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(MYPY_CACHE),
            "my_vllm_state.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.rstrip("\n") == shown.code.rstrip("\n"), (
        f"docs/typing.md:{shown.line}: the output differs from mypy's:\n{done.stdout}{done.stderr}"
    )
