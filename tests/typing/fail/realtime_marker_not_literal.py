"""The realtime marker must be ClassVar[Literal[True]] (SPEC T3)."""

from __future__ import annotations

from support.typing_examples import ClassVarBoolMarker, PlainTrueMarker

from rtmm_protocol import SupportsRealtime, supports_realtime


class SwitchedOff(SupportsRealtime):
    supports_realtime = False  # E: assignment  # P: reportAssignmentType


plain: SupportsRealtime = PlainTrueMarker()  # E: assignment  # P: reportAssignmentType
class_var_bool: SupportsRealtime = ClassVarBoolMarker()  # E: assignment  # P: reportAssignmentType
plain_class: type[SupportsRealtime] = PlainTrueMarker  # E: assignment  # P: reportAssignmentType


def narrow(model: PlainTrueMarker | None) -> None:
    # The guard is True at run time here, but a plain bool cannot match the Protocol:
    # with --warn-unreachable mypy says so instead of skipping the branch silently.
    if supports_realtime(model):
        print("realtime")  # E: unreachable
