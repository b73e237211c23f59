"""The settings of one conformance run: one record, :class:`RunSettings`, whose field
defaults are the suite's defaults (the pytest plugin declares its options from them). It
imports no torch: the plugin reads it in every pytest run, and asking torch whether CUDA
is available would initialise CUDA here (the checks' process resolves ``"auto"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Final, TypedDict

from rtmm_protocol._version import PROTOCOL_VERSION
from rtmm_protocol.testing.model_configuration import ModelConfiguration, parse_attribute

if TYPE_CHECKING:
    import torch

__all__ = [
    "DTYPE_NAMES",
    "FAIL_ON",
    "ISOLATIONS",
    "MERGE_TOLERANCES",
    "REFERENCE_MODEL_STATE",
    "RunSettings",
    "SettingOptions",
    "Tolerance",
    "USER_OPTIONS",
]

#: dtype names a run accepts, the default first.
DTYPE_NAMES: Final = ("float32", "float16", "bfloat16")
#: Where checks run: ``process`` (a worker process: CUDA-safe, a crash or a hang fails one
#: check), ``off`` (the calling process), ``auto`` (``process`` unless the factory cannot
#: be sent to another process).
ISOLATIONS: Final = ("auto", "process", "off")
#: What makes a run fail: ``own`` contract failures only (the default for a target with a
#: baseline, such as a vLLM class), every ``contract`` failure (the default otherwise), or
#: ``all``: robustness and SHOULD failures too (the strict profile, ``--conformance-strict``).
FAIL_ON: Final = ("own", "contract", "all")
#: The factory ``pytest --conformance`` checks when given no value.
REFERENCE_MODEL_STATE: Final = "rtmm_conformance.targets:reference_model_state"


@dataclass(frozen=True)
class Tolerance:
    """``torch.testing.assert_close`` tolerances for merged embeddings of one dtype."""

    rtol: float
    atol: float


#: Merged embeddings are compared with these tolerances: the merge does arithmetic in
#: the state's dtype (the realtime toy adds rows), and a state may order it differently.
#: The gather itself is compared exactly: its pieces are views of cached rows.
MERGE_TOLERANCES: Final[dict[str, Tolerance]] = {
    "float32": Tolerance(rtol=1e-5, atol=1e-5),
    "float16": Tolerance(rtol=1e-3, atol=1e-3),
    "bfloat16": Tolerance(rtol=1.6e-2, atol=1e-2),
}


@dataclass(frozen=True)
class RunSettings:
    """Options of a run, and the only place their defaults are written. ``device`` and
    ``dtype`` are kept as names (a ``torch.device`` or ``torch.dtype`` given is turned into
    its name); ``version`` selects the requirement set the run is scored against."""

    #: ``"auto"`` (CUDA where the checks run has it, else the CPU; decided there), or a
    #: device such as ``"cpu"`` or ``"cuda:0"``. ``None`` means ``"auto"``.
    device: str | torch.device | None = "auto"
    #: The state's buffer dtype: one of :data:`DTYPE_NAMES`.
    dtype: str | torch.dtype = "float32"
    #: Fixed so that two runs of the same target see the same batches; printed in the header.
    seed: int = 20260
    #: Random examples per check and mode, on top of each check's hand-placed cases.
    examples: int = 30
    #: Seconds one check (in one mode) may take before it is failed as hanging.
    timeout_s: float = 120.0
    #: The strict profile: ``fail_on="all"`` by the name of the command line's
    #: ``--conformance-strict`` (either sets the other; what fails a run is read from
    #: :meth:`fails_on` alone).
    strict: bool = False
    #: What fails the run: one of :data:`FAIL_ON`; ``None`` for the default, ``own`` when
    #: the target has a baseline and ``contract`` otherwise (see :meth:`fails_on`).
    fail_on: str | None = None
    version: str = PROTOCOL_VERSION
    #: Shrink failing examples (off only where detection is all that matters).
    shrink: bool = True
    #: Where checks run: one of :data:`ISOLATIONS` (``"fork"``, 0.1's name, means process).
    isolation: str = "auto"
    #: The model's configuration (SPEC M3), for a state that reads it when it is built: a
    #: checkpoint's ``config.json`` (or its folder), a mapping of its values or a
    #: configuration object; kept as a :class:`ModelConfiguration`. ``None``: the toy
    #: model's configuration holds only its sizes.
    model_config: object = None
    #: Attributes of the model the state reads: ``{"token_lookback_depth": 4}``, or
    #: ``NAME=VALUE`` strings as the command line gives them; kept as (name, value) pairs.
    model_attrs: Mapping[str, object] | Sequence[object] = ()
    hidden_size: int = 4
    max_num_tokens: int = 128
    max_num_reqs: int = 8

    def __post_init__(self) -> None:
        if self.model_config is not None:
            object.__setattr__(self, "model_config", ModelConfiguration.of(self.model_config))
        object.__setattr__(self, "model_attrs", _attribute_pairs(self.model_attrs))
        device = "auto" if self.device is None else str(self.device)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "dtype", str(self.dtype).removeprefix("torch."))
        if self.isolation == "fork":
            object.__setattr__(self, "isolation", "process")
        if self.fail_on == "all":
            object.__setattr__(self, "strict", True)  # one setting, two spellings
        problem = self._problem()
        if problem:
            raise ValueError(problem)

    def _problem(self) -> str:
        """What is wrong with these settings ("" if nothing), naming the option."""
        if self.dtype not in DTYPE_NAMES:
            return f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPE_NAMES)}"
        if self.examples < 0:
            return f"examples must be >= 0, got {self.examples}"
        if self.timeout_s <= 0:
            return f"timeout_s must be positive, got {self.timeout_s}"
        if self.fail_on is not None and self.fail_on not in FAIL_ON:
            return f"fail_on must be one of {', '.join(FAIL_ON)}, got {self.fail_on!r}"
        if self.strict and self.fail_on not in (None, "all"):
            return (
                f"strict fails the run on every failure, which fail_on={self.fail_on!r} "
                "contradicts; give one of them"
            )
        if self.isolation not in ISOLATIONS:
            return f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
        return ""

    @property
    def attribute_pairs(self) -> tuple[tuple[str, object], ...]:
        """The model attributes as (name, value) pairs (as ``__post_init__`` keeps them)."""
        return _attribute_pairs(self.model_attrs)

    @property
    def configuration(self) -> ModelConfiguration | None:
        """The model's configuration and attributes together (``None`` if neither is set)."""
        attributes = dict(self.attribute_pairs)
        if self.model_config is None:
            return ModelConfiguration(attributes=attributes) if attributes else None
        assert isinstance(self.model_config, ModelConfiguration)  # after __post_init__
        return self.model_config.with_attributes(attributes)

    @property
    def torch_device(self) -> torch.device:
        """The device as torch names it (after ``"auto"`` was resolved where checks run)."""
        import torch

        return torch.device("cpu" if self.device == "auto" else str(self.device))

    @property
    def torch_dtype(self) -> torch.dtype:
        """The buffer's dtype as a ``torch.dtype``."""
        import torch

        dtype: torch.dtype = getattr(torch, str(self.dtype))
        return dtype

    @property
    def tolerance(self) -> Tolerance:
        """Merge tolerance for this run's dtype."""
        return MERGE_TOLERANCES[str(self.dtype)]

    def fails_on(self, has_baseline: bool) -> str:
        """What fails the run, the default resolved: ``all`` when strict; else ``own`` for
        a target with a baseline (its inherited failures are the baseline's), ``contract``
        for any other."""
        if self.strict:
            return "all"
        return self.fail_on or ("own" if has_baseline else "contract")

    def summary(self) -> dict[str, object]:
        """The options a user sets, as JSON-ready data (as reports record them)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name in USER_OPTIONS}
        config = self.model_config
        values["model_config"] = (
            config.describe() if isinstance(config, ModelConfiguration) else None
        )
        values["model_attrs"] = {name: _json_ready(value) for name, value in self.attribute_pairs}
        return values


def _attribute_pairs(attrs: object) -> tuple[tuple[str, object], ...]:
    """Model attributes as (name, value) pairs, from a mapping or ``NAME=VALUE`` strings;
    ``ValueError`` names a malformed one."""
    pairs: list[tuple[str, object]] = []
    if isinstance(attrs, Mapping):
        for name, value in attrs.items():
            parse_attribute(f"{name}=null")  # the name's checks
            pairs.append((str(name), value))
        return tuple(pairs)
    if isinstance(attrs, (str, bytes)) or not isinstance(attrs, Sequence):
        raise ValueError(
            f"model_attrs must be a mapping of attribute names to values or NAME=VALUE "
            f"strings, got {attrs!r}"
        )
    for item in attrs:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            pairs.append((item[0], item[1]))
        else:
            pairs.append(parse_attribute(str(item)))
    return tuple(pairs)


def _json_ready(value: object) -> object:
    """``value`` where JSON can hold it, else its description."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    return getattr(value, "description", None) or repr(value)


class SettingOptions(TypedDict, total=False):
    """:class:`RunSettings`' options as keywords, for the functions that pass them on
    (their defaults are the record's)."""

    device: str | torch.device | None
    dtype: str | torch.dtype
    seed: int
    examples: int
    timeout_s: float
    strict: bool
    fail_on: str | None
    version: str
    shrink: bool
    isolation: str
    model_config: object
    model_attrs: Mapping[str, object] | Sequence[object]


#: The options a user sets (the rest are the harness's sizes): reports record these.
USER_OPTIONS: Final = (
    "seed", "examples", "timeout_s", "strict", "fail_on", "version", "dtype", "device", "isolation",
    "model_config", "model_attrs",
)  # fmt: skip
