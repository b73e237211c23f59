"""The realtime marker must be ClassVar[Literal[True]] (SPEC T3)."""

from __future__ import annotations

from typing import ClassVar

from rtmm_protocol import SupportsRealtime, supports_realtime


class PlainTrue:
    supports_realtime = True


class ClassVarBool:
    supports_realtime: ClassVar[bool] = True


class SwitchedOff(SupportsRealtime):
    supports_realtime = False  # E: assignment  # P: reportAssignmentType


plain: SupportsRealtime = PlainTrue()  # E: assignment  # P: reportAssignmentType
class_var_bool: SupportsRealtime = ClassVarBool()  # E: assignment  # P: reportAssignmentType
plain_class: type[SupportsRealtime] = PlainTrue  # E: assignment  # P: reportAssignmentType


def narrow(model: PlainTrue | None) -> None:
    # The guard is True at run time here, but a plain bool cannot match the Protocol:
    # with --warn-unreachable mypy says so instead of skipping the branch silently.
    if supports_realtime(model):
        print("realtime")  # E: unreachable
