"""The one settings record: its defaults are the plugin's, it takes torch's objects or
their names, names the option that is wrong, and loads without torch (as do the plugin
and the compliance matrix)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest
import torch

from rtmm_conformance.settings import USER_OPTIONS, RunSettings, SettingOptions


def test_the_keyword_options_are_the_records_fields() -> None:
    names = {f.name for f in fields(RunSettings)}
    assert set(SettingOptions.__annotations__) <= names
    assert set(USER_OPTIONS) <= set(SettingOptions.__annotations__)
    assert set(RunSettings().summary()) == set(USER_OPTIONS)


def test_torch_objects_and_their_names_are_the_same_settings() -> None:
    named = RunSettings(device="cpu", dtype="float16")
    assert RunSettings(device=torch.device("cpu"), dtype=torch.float16) == named
    assert (named.torch_device, named.torch_dtype) == (torch.device("cpu"), torch.float16)
    assert RunSettings(device=None).device == RunSettings().device == "auto"
    assert RunSettings(isolation="fork").isolation == "process"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dtype": "float64"}, "unknown dtype 'float64'"),
        ({"examples": -1}, "examples must be >= 0, got -1"),
        ({"timeout_s": 0}, "timeout_s must be positive, got 0"),
        ({"fail_on": "some"}, "fail_on must be one of own, contract, all, got 'some'"),
        ({"isolation": "thread"}, "isolation must be one of auto, process, off, got 'thread'"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunSettings(**options)  # type: ignore[arg-type]


def test_the_settings_the_plugin_and_the_matrix_load_without_torch() -> None:
    """pytest loads the plugin in every run: declaring its options must not import torch;
    the compliance matrix reads reports alone (neither torch nor Hypothesis)."""
    code = (
        "import sys\n"
        "import rtmm_conformance.plugin, rtmm_conformance.settings\n"
        "import rtmm_conformance.reporting.matrix\n"
        "rtmm_conformance.settings.RunSettings(device='cpu', dtype='bfloat16')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'hypothesis' not in sys.modules, 'hypothesis was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
