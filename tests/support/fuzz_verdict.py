"""Runs one bad-input fuzz case and judges it: a clean error, the exact result, or bad.

The case's call runs on a fresh world with one corruption applied; its verdict is

- ``error``: a ``ValueError`` or ``TypeError`` (or, for a genuine miss, the G7
  ``RuntimeError`` subclass) whose message names one of the corrupted fields, for a call
  the spec does not make legal (or makes dubious, see :class:`~support.fuzz_expected.Expected`);
- ``exact``: exactly the oracle's result, for a legal call (including the G7 error when
  the oracle says a needed output is missing);
- ``bad``: anything else: another exception, an unnamed field, a refused legal call,
  an accepted illegal one, a different result, or mutated input arrays.

Then the corruption is undone where it touched the cache and the same objects get the
valid call; its verdict must be ``exact`` (a clean error must not poison anything).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtmm_protocol import EncoderOutputMissingError
from rtmm_protocol.testing.scenario import GatherScenario
from support.fuzz_corruptions import Corruption
from support.fuzz_expected import Expected, compare, expected_result
from support.fuzz_world import FuzzWorld, StepInputs, Target, run_target

__all__ = ["FuzzCase", "Tally", "Verdict", "judge_case"]


@dataclass(frozen=True)
class FuzzCase:
    """Everything one fuzz input is made of."""

    scenario: GatherScenario
    realtime: bool
    validate: bool
    target: Target
    corruption: Corruption
    int_dtype: type[np.integer[Any]]
    encodable: frozenset[str]
    dummy_tokens: int

    def world(self) -> FuzzWorld:
        """A fresh world for this case."""
        return FuzzWorld.build(
            self.scenario, realtime=self.realtime, validate=self.validate, encodable=self.encodable
        )

    def valid_inputs(self, world: FuzzWorld) -> StepInputs:
        """The case's valid call."""
        return StepInputs.valid(world, int_dtype=self.int_dtype, dummy_tokens=self.dummy_tokens)


@dataclass(frozen=True)
class Verdict:
    """``error``, ``exact`` or ``bad``, and what was seen."""

    kind: str
    detail: str = ""


def _names_field(error: BaseException, fields: tuple[str, ...]) -> bool:
    message = str(error)
    return any(name in message for name in fields)


def _judge_call(
    call: Callable[[], Any],
    expected: Expected,
    fields: tuple[str, ...],
    target: Target,
    world: FuzzWorld,
) -> Verdict:
    try:
        result = call()
    except EncoderOutputMissingError as error:
        oracle = expected.oracle
        if expected.illegal is None and oracle is not None and oracle.raises:
            if any(identifier in str(error) for identifier, _ in oracle.missing):
                return Verdict("exact")
            return Verdict("bad", f"G7 error names none of {oracle.missing}: {error}")
        if expected.illegal is None and expected.dubious is None:
            return Verdict("bad", f"G7 error for a legal call without a miss: {error}")
        if _names_field(error, (*fields, *expected.misses)):
            return Verdict("error")
        return Verdict("bad", f"G7 error that names no field: {error}")
    except (ValueError, TypeError) as error:
        if expected.illegal is None and expected.dubious is None:
            return Verdict("bad", f"refused a legal call: {type(error).__name__}: {error}")
        if _names_field(error, fields):
            return Verdict("error")
        return Verdict("bad", f"error names none of {fields}: {type(error).__name__}: {error}")
    except Exception as error:  # every other exception is a bad outcome, reported
        return Verdict("bad", f"{type(error).__name__}: {error}")
    if expected.illegal is not None:
        return Verdict("bad", f"accepted an illegal call ({expected.illegal})")
    difference = compare(target, world, expected, result)
    return Verdict("exact") if difference is None else Verdict("bad", difference)


def _judge_own_call(case: FuzzCase, world: FuzzWorld, inputs: StepInputs) -> Verdict:
    """Registration and construction cases: the corruption is the call."""
    corruption = case.corruption
    legality = (
        corruption.kind.removeprefix("construct ") if corruption.kind != "register" else "illegal"
    )
    try:
        corruption.apply(inputs, world)
    except (ValueError, TypeError) as error:
        if legality == "legal":
            return Verdict("bad", f"refused a legal call: {type(error).__name__}: {error}")
        if _names_field(error, corruption.fields):
            return Verdict("error")
        return Verdict("bad", f"error names none of {corruption.fields}: {error}")
    except Exception as error:  # every other exception is a bad outcome, reported
        return Verdict("bad", f"{type(error).__name__}: {error}")
    if legality == "illegal":
        return Verdict("bad", "accepted")
    return Verdict("exact")


def judge_case(case: FuzzCase) -> tuple[Verdict, Verdict]:
    """The verdicts of the corrupted call and of the valid call that follows it."""
    world = case.world()
    inputs = case.valid_inputs(world)
    corruption = case.corruption
    if corruption.kind != "call":
        first = _judge_own_call(case, world, inputs)
    else:
        restore = corruption.apply(inputs, world)
        expected = expected_result(case.target, world, inputs)
        arrays = inputs.arrays()
        before = {name: (array.dtype, array.copy()) for name, array in arrays.items()}
        first = _judge_call(
            lambda: run_target(case.target, world, inputs),
            expected,
            corruption.fields,
            case.target,
            world,
        )
        for name, (dtype, values) in before.items():
            after = arrays[name]
            if after.dtype != dtype or not np.array_equal(after, values):
                first = Verdict("bad", f"G9: {name} was changed by the call")
        if restore is not None:
            restore()
    valid = case.valid_inputs(world)
    expected = expected_result(case.target, world, valid)
    if expected.illegal is not None or expected.dubious is not None:
        return first, Verdict(
            "bad", f"the cache was left broken: {expected.illegal or expected.dubious}"
        )
    follow = _judge_call(
        lambda: run_target(case.target, world, valid), expected, (), case.target, world
    )
    return first, follow


@dataclass
class Tally:
    """Counts over a fuzz run, and the first bad outcomes for the report."""

    inputs: int = 0
    clean_errors: int = 0
    exact: int = 0
    bad: int = 0
    follow_ups: int = 0
    bad_follow_ups: int = 0
    by_family: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    _seen: set[tuple[str, ...]] = field(default_factory=set)

    def add(self, case: FuzzCase, first: Verdict, follow: Verdict) -> None:
        """Count one case."""
        self.inputs += 1
        self.follow_ups += 1
        family = case.corruption.name.split(":")[0].split("[")[0].split("(")[0].split(" =")[0]
        self.by_family[f"{case.target}/{family}/{first.kind}"] += 1
        if first.kind == "error":
            self.clean_errors += 1
        elif first.kind == "exact":
            self.exact += 1
        else:
            self.bad += 1
            self._note(case, "call", first)
        if follow.kind != "exact":
            self.bad_follow_ups += 1
            self._note(case, "follow-up", follow)

    def _note(self, case: FuzzCase, which: str, verdict: Verdict) -> None:
        # One example per kind of failure, so that a frequent one does not hide the rest.
        kind = (which, case.target, case.corruption.name.split(":")[0], verdict.detail[:40])
        if kind not in self._seen and len(self.examples) < 40:
            self._seen.add(kind)
            self.examples.append(
                f"{which} of {case.target} (realtime={case.realtime}, validate={case.validate}, "
                f"{np.dtype(case.int_dtype).name}) after {case.corruption.name}: {verdict.detail}"
            )

    def summary(self) -> str:
        """One line of figures."""
        return (
            f"inputs={self.inputs} clean_errors={self.clean_errors} exact={self.exact} "
            f"bad={self.bad} follow_ups={self.follow_ups} bad_follow_ups={self.bad_follow_ups}"
        )
