"""``load_target("MODULE:CLASS")``: what the suite needs to check a vLLM class.

The suite calls :func:`load_target` for ``--conformance=vllm:MODULE:CLASS`` (and for
``check_model_state("vllm:MODULE:CLASS")``) and gets a :class:`VllmTarget`: the factory
building the class, the factory building the vLLM class it derives from (so that a
failure the user's class merely inherits can be told from one of its own), a label for
reports and the vLLM version for the report's environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.adapters.vllm.class_kind import classify, vllm_classes
from rtmm_protocol.adapters.vllm.class_spec import ClassSpec, parse_class_spec
from rtmm_protocol.adapters.vllm.factories import VllmFactory
from rtmm_protocol.adapters.vllm.in_tree import default_configuration
from rtmm_protocol.testing.model_configuration import ModelConfiguration

__all__ = ["VllmTarget", "load_target"]


@dataclass(frozen=True)
class VllmTarget:
    """A vLLM class ready to be checked.

    ``factory`` builds the class (``FACTORY(ctx) -> target``); ``baseline`` builds the
    nearest class vLLM itself defines among the class's bases the same way, or is
    ``None`` when the class *is* vLLM's own; ``label`` names the class and what it
    derives from for reports; ``baseline_name`` is the spec that checks the baseline on
    its own (``vllm:MODULE:CLASS``, empty without a baseline); ``environment`` holds
    extra report fields (the vLLM version at least); ``configuration`` is the model
    configuration the class is built with when the run names none (vLLM's own states
    and their subclasses have one, SPEC M3). Both factories can be pickled by reference.
    """

    factory: VllmFactory
    baseline: VllmFactory | None
    label: str
    baseline_name: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    configuration: ModelConfiguration | None = None


def load_target(spec: str) -> VllmTarget:
    """The target for ``spec`` (``MODULE:CLASS``, without the ``vllm:`` prefix).

    Raises :class:`~rtmm_protocol.adapters.vllm.class_spec.VllmSpecError` (a
    ``ValueError``) for a spec that is not ``MODULE:CLASS`` or names no ModelState or
    EncoderRunner subclass, and
    :class:`~rtmm_protocol.adapters.vllm.availability.VllmUnavailableError` (an
    ``ImportError``) when vLLM is missing or not a supported release.
    """
    class_spec = parse_class_spec(spec)
    vllm = import_vllm()
    vllm_classes()  # quietly, before the user's module imports them
    cls = class_spec.import_class()
    kind = classify(cls, str(class_spec))
    version = str(vllm.__version__)
    baseline: VllmFactory | None = None
    baseline_name = ""
    if kind.baseline is not None:
        base_spec = ClassSpec(kind.baseline.__module__, kind.baseline.__qualname__)
        baseline = VllmFactory(base_spec, kind.level)
        baseline_name = f"vllm:{base_spec}"
    if kind.is_vllm_own:
        label = f"{class_spec} (vLLM {version})"
    else:
        label = f"{class_spec} (subclass of vLLM {version} {kind.vllm_base.__qualname__})"
    return VllmTarget(
        factory=VllmFactory(class_spec, kind.level),
        baseline=baseline,
        label=label,
        baseline_name=baseline_name,
        environment={"vllm": version},
        configuration=default_configuration(cls),
    )
