"""Bad input never crashes, never gives a wrong answer and never poisons (SPEC E1-E3).

Each input is a valid scenario with one corruption (see :mod:`support.fuzz_corruptions`)
called on one target: the runner's gather, the plan's rows, the state's gather, the
state's real path, a dummy run, a registration or a constructor. Its verdict must be a
clean error naming the corrupted field or exactly the oracle's result; then a valid call
on the same objects must give exactly the oracle's result.

Profiles: the short one (about 2,000 inputs under the CI profile, 200 locally) runs with
the suite. The long one is selected by ``RTMM_FUZZ_INPUTS`` (for example 50000): it runs
that many inputs, collects every verdict instead of stopping at the first bad one, and
prints the figures (inputs, clean errors, exact results, bad outcomes, bad follow-ups);
``RTMM_FUZZ_REPORT=PATH`` also writes them as JSON::

    RTMM_FUZZ_INPUTS=50000 RTMM_FUZZ_REPORT=fuzz.json \\
        pytest tests/test_bad_input_fuzz.py -p no:cacheprovider -s
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz_corruptions import corruptions
from support.fuzz_verdict import FuzzCase, Tally, judge_case
from support.fuzz_world import TARGETS
from support.profiles import example_budget

from rtmm_protocol.testing.strategies import gather_scenarios

#: Inputs of the long profile, when set.
INPUTS_ENV_VAR = "RTMM_FUZZ_INPUTS"
#: Where the long profile writes its figures as JSON, when set.
REPORT_ENV_VAR = "RTMM_FUZZ_REPORT"

_LONG_INPUTS = int(os.environ.get(INPUTS_ENV_VAR, "0") or 0)
_INPUTS = _LONG_INPUTS or example_budget(ci=2000, dev=200)
_COLLECT = bool(_LONG_INPUTS)


@st.composite
def fuzz_cases(draw: st.DrawFn) -> FuzzCase:
    """A valid scenario, a target, and one corruption of the call on it."""
    scenario = draw(
        gather_scenarios(
            max_requests=4,
            max_features=3,
            max_scheduled=8,
            cache_miss_rate=0.2,
            zero_scheduled=True,
        )
    )
    target = draw(st.sampled_from(TARGETS))
    uncached = sorted(f.identifier for r in scenario.requests for f in r.features if not f.cached)
    encodable = (
        frozenset(draw(st.lists(st.sampled_from(uncached), unique=True)))
        if uncached
        else frozenset()
    )
    int_dtypes: list[type[np.integer[Any]]] = [np.int32, np.int64]
    int_dtype = draw(st.sampled_from(int_dtypes))
    return FuzzCase(
        scenario=scenario,
        realtime=draw(st.booleans()),
        validate=draw(st.booleans()),
        target=target,
        corruption=draw(corruptions(target, scenario)),
        int_dtype=int_dtype,
        encodable=encodable,
        dummy_tokens=draw(st.integers(0, scenario.num_tokens + scenario.padding + 4)),
    )


def _describe(case: FuzzCase) -> str:
    return (
        f"{case.corruption.name} on {case.target} (realtime={case.realtime}, "
        f"validate={case.validate}, {np.dtype(case.int_dtype).name})\n{case.scenario.to_python()}"
    )


def test_e3_every_corrupted_call_is_a_clean_error_or_exact_and_poisons_nothing() -> None:
    tally = Tally()

    @settings(
        max_examples=_INPUTS,
        deadline=None,
        database=None if _COLLECT else settings().database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=fuzz_cases())
    def run(case: FuzzCase) -> None:
        first, follow = judge_case(case)
        tally.add(case, first, follow)
        if not _COLLECT:
            assert first.kind != "bad", f"E3: {first.detail}\n{_describe(case)}"
            assert follow.kind == "exact", (
                f"E3 (poisoned): the valid call after the corrupted one gave {follow.detail}\n"
                f"{_describe(case)}"
            )

    run()
    print(f"\nbad-input fuzz: {tally.summary()}")
    report = os.environ.get(REPORT_ENV_VAR)
    if report:
        figures = {
            "inputs": tally.inputs,
            "clean_errors": tally.clean_errors,
            "exact": tally.exact,
            "bad": tally.bad,
            "follow_ups": tally.follow_ups,
            "bad_follow_ups": tally.bad_follow_ups,
            "by_target_family_verdict": dict(sorted(tally.by_family.items())),
            "bad_examples": tally.examples,
        }
        Path(report).write_text(json.dumps(figures, indent=2) + "\n")
    failures = "\n".join([f"E3: {tally.summary()}", *tally.examples])
    assert tally.bad == 0, failures
    assert tally.bad_follow_ups == 0, failures
