"""The C checks: a target through a life in which the engine changes the cache the SPEC C1 ways.

The stateful life of G8 changes the cache only through its methods and re-caches an
output with the values it had. Here the life also makes every other change SPEC C1
allows between two steps: a request added by assigning its list, a feature appended
to the list in place or by assigning a longer list, a list item replaced by one with
the same identifier and placeholder (``dataclasses.replace``, a data update), outputs
stored, deleted and re-put with *new* values by assigning into ``encoder_outputs``
directly, and freed and put again. A state that keeps derived data between calls (an
offset table, a pointer per identifier) must notice each one.

Two checks judge the same lives: C1 that no allowed change makes the target refuse a
gather that is due, C2 that every result equals what a fresh state returns on the
current cache (the oracle), including the error for an output that is gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from rtmm_conformance.checks.registry import check
from rtmm_conformance.checks.stateful import (
    FEATURE_SHAPES,
    FeatureShape,
    Judge,
    LiveRequest,
    life_machine,
    replay_preamble,
    replayable,
    run_lives,
    when,
)
from rtmm_conformance.driving.check_run import Built, CheckRun
from rtmm_conformance.driving.gather_call import GatherCall, describe_error
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.testing.scenario import FeatureSpec, distinct_output

__all__ = ["JUDGES", "change_life"]

_choice = st.integers(0, 1000)
#: Ordinal stride between generations of one feature's output: every re-put output has
#: values no earlier output of the life had (see ``distinct_output``).
_GENERATION_STRIDE = 1000


def _judge_accepts(run: CheckRun) -> Judge:
    """C1: a gather that is due after allowed changes is answered, not refused."""

    def judge(call: GatherCall) -> None:
        if call.oracle.raises or call.error is None:
            return
        raise CheckFailure(
            "the target refused a gather after a change the contract allows between steps",
            expected="a result (every needed output is cached)",
            seen=describe_error(call.error),
        ) from call.error

    return judge


def _judge_fresh(run: CheckRun) -> Judge:
    """C2: every result is what a freshly built target returns on a copy of the cache.

    The comparison is with the target itself, not the oracle, so that C2 judges staleness
    alone: a target that is wrong the same way when fresh fails the gather clause it
    breaks (G1 to G7), not C2.
    """

    def judge(call: GatherCall) -> None:
        fresh = run.build(hidden_size=call.scenario.hidden_size)
        for req_id, features in call.features.items():
            dict.__setitem__(fresh.cache.mm_features, req_id, list(features))
        for identifier, output in call.outputs.items():
            dict.__setitem__(fresh.cache.encoder_outputs, identifier, output.clone())
        again = run.gather(fresh, call.scenario)
        if again.error is not None and call.error is None:
            raise CheckFailure(
                "the target returned a result where a fresh state raises, after a change "
                "between steps (a stale result)",
                expected=f"what a fresh state does on the same cache: {describe_error(again.error)}",
                seen="a result, made from data kept since an earlier step",
            )
        if again.error is not None or call.error is not None:
            return  # a refusal is judged by C1, the error itself by G7
        try:
            then = again.unpack()
        except CheckFailure:
            return  # fresh, the result is malformed too: G4 to G6 judge that
        now = call.unpack()
        if not torch.equal(now.mask, then.mask):
            raise CheckFailure(
                "the mask differs from a fresh state's after a change between steps "
                "(a stale result)",
                expected=f"{then.mask.tolist()} (a fresh state on the same cache)",
                seen=str(now.mask.tolist()),
            )
        hidden = call.scenario.hidden_size
        stale, right = now.rows(hidden), then.rows(hidden)
        if not torch.equal(stale, right):
            if stale.shape != right.shape:
                expected, got = f"{right.shape[0]} rows", f"{stale.shape[0]} rows"
            else:  # the first row that differs, by its first values
                k = int((stale != right).any(dim=1).nonzero()[0])
                expected, got = (f"row {k} = {rows[k, :4].tolist()}..." for rows in (right, stale))
            raise CheckFailure(
                "the gathered rows differ from a fresh state's after a change between steps "
                "(a stale result)",
                expected=f"{expected}, as a fresh state gathers them on the same cache",
                seen=got,
            )

    return judge


def change_life(run: CheckRun, judge: Judge) -> type[RuleBasedStateMachine]:
    """The G8 life with the changes of SPEC C1 as extra rules, judged by ``judge``."""
    base = life_machine(run, judge=judge, keeps_cache=False)
    max_requests = run.settings.max_num_reqs
    hidden = run.settings.hidden_size

    class ChangingLife(base):  # type: ignore[valid-type,misc]  # a class built at run time
        """Requests, lists and outputs change between steps in every way C1 allows."""

        # What this class uses of the life built by ``life_machine``: a class made at run
        # time is only a ``RuleBasedStateMachine`` to a type checker. Annotations alone, so
        # nothing here shadows the base's attributes.
        built: Built
        requests: dict[str, LiveRequest]
        ordinals: dict[str, int]
        counter: int
        _new_feature: Callable[[int, FeatureShape], FeatureSpec]
        _cache: Callable[[FeatureSpec], None]
        _register: Callable[
            [int, list[FeatureShape], Callable[[str, list[MultiModalFeature]], None]], None
        ]

        replay_header = replay_preamble(run, "change_life_for")

        def __init__(self) -> None:
            super().__init__()
            self.generations: dict[str, int] = {}

        def _live(self) -> list[FeatureSpec]:
            return [f for r in self.requests.values() for f in r.features]

        def _cached(self) -> list[str]:
            with self.built.cache.paused():
                return sorted(dict.keys(self.built.cache.encoder_outputs))

        def _lists(self) -> dict[str, list[MultiModalFeature]]:
            return self.built.cache.mm_features

        def _put(self, spec: FeatureSpec) -> None:
            """Store an output with values no earlier output of this life had."""
            generation = self.generations.get(spec.identifier, 0) + 1
            self.generations[spec.identifier] = generation
            ordinal = self.ordinals[spec.identifier] + generation * _GENERATION_STRIDE
            output = distinct_output(ordinal, spec.num_embeds, hidden).to(run.device)
            with self.built.cache.paused():
                self.built.cache.encoder_outputs[spec.identifier] = output

        def _pick(self, choice: int) -> tuple[str, LiveRequest]:
            req_id = sorted(self.requests)[choice % len(self.requests)]
            return req_id, self.requests[req_id]

        @precondition(when(lambda self: len(self.requests) < max_requests))
        @rule(prefill_len=st.integers(0, 20), shapes=st.lists(FEATURE_SHAPES, max_size=3))
        @replayable
        def assign_request(self, prefill_len: int, shapes: list[FeatureShape]) -> None:
            """A new request whose list is assigned into ``mm_features`` directly."""
            self._register(prefill_len, shapes, self._lists().__setitem__)

        def _grow(self, choice: int, shape: FeatureShape, in_place: bool) -> None:
            req_id, request = self._pick(choice)
            spec = self._new_feature(max(request.end, request.computed) + shape[0], shape)
            with self.built.cache.paused():
                features = self._lists()[req_id]
                if in_place:
                    features.append(spec.build())
                else:
                    self._lists()[req_id] = [*features, spec.build()]
            request.features.append(spec)
            if spec.cached:
                self._cache(spec)

        @precondition(when(lambda self: bool(self.requests)))
        @rule(choice=_choice, shape=FEATURE_SHAPES)
        @replayable
        def append_in_place(self, choice: int, shape: FeatureShape) -> None:
            """A feature appended to the request's own list object."""
            self._grow(choice, shape, in_place=True)

        @precondition(when(lambda self: bool(self.requests)))
        @rule(choice=_choice, shape=FEATURE_SHAPES)
        @replayable
        def assign_longer_list(self, choice: int, shape: FeatureShape) -> None:
            """A new, longer list assigned in place of the request's list."""
            self._grow(choice, shape, in_place=False)

        @precondition(when(lambda self: any(r.features for r in self.requests.values())))
        @rule(choice=_choice)
        @replayable
        def replace_data(self, choice: int) -> None:
            """A list item replaced by a copy with new data (same identifier and placeholder)."""
            specs = self._live()
            spec = specs[choice % len(specs)]
            req_id = next(k for k, r in self.requests.items() if spec in r.features)
            with self.built.cache.paused():
                features = self._lists()[req_id]
                index = next(i for i, f in enumerate(features) if f.identifier == spec.identifier)
                features[index] = dataclasses.replace(
                    features[index], data={"revision": torch.tensor([self.counter])}
                )
            self.counter += 1

        @precondition(when(lambda self: bool(self._live())))
        @rule(choice=_choice)
        @replayable
        def put_new_values(self, choice: int) -> None:
            """An output stored, or replaced by one with new values, by direct assignment."""
            specs = self._live()
            self._put(specs[choice % len(specs)])

        @precondition(when(lambda self: bool(self._cached())))
        @rule(choice=_choice)
        @replayable
        def delete_output(self, choice: int) -> None:
            """An output deleted from ``encoder_outputs`` directly."""
            cached = self._cached()
            with self.built.cache.paused():
                del self.built.cache.encoder_outputs[cached[choice % len(cached)]]

        @precondition(
            when(lambda self: bool({f.identifier for f in self._live()} & set(self._cached())))
        )
        @rule(choice=_choice)
        @replayable
        def free_and_put_again(self, choice: int) -> None:
            """An output freed through the cache, then put again with new values."""
            cached = set(self._cached())
            specs = [f for f in self._live() if f.identifier in cached]
            spec = specs[choice % len(specs)]
            with self.built.cache.paused():
                self.built.cache.free_encoder_output(spec.identifier)
            self._put(spec)

    ChangingLife.__name__ = ChangingLife.__qualname__ = "GatherLife"
    return ChangingLife


#: Hand-written lives, run before the random ones: every change of SPEC C1 at least
#: once, each followed by a step whose window reads what changed; two dummy runs of one
#: size in the second (where a state has them), which must hand out one buffer.
_SCRIPTED_LIVES: tuple[tuple[tuple[str, dict[str, object]], ...], ...] = (
    (
        ("start", {"prompts": [(24, [(0, 4, None, True), (1, 3, (True, False, True), True)])]}),
        ("step_all", {"size": 2}),
        ("free_and_put_again", {"choice": 0}),
        ("step_all", {"size": 2}),
        ("put_new_values", {"choice": 1}),
        ("step_all", {"size": 4}),
        ("append_in_place", {"choice": 0, "shape": (0, 2, None, True)}),
        ("step_all", {"size": 2}),
        ("assign_longer_list", {"choice": 0, "shape": (0, 3, (False, True, True), True)}),
        ("step_all", {"size": 3}),
        ("replace_data", {"choice": 0}),
        ("step", {"choices": [0], "sizes": [4, 0, 0, 0], "lookahead": 0}),
    ),
    (
        ("start", {"prompts": [(8, [(1, 3, None, True)])]}),
        ("assign_request", {"prefill_len": 10, "shapes": [(1, 4, None, True)]}),
        ("dummy_run", {"size": 3}),
        ("step_all", {"size": 3}),
        ("put_new_values", {"choice": 1}),
        ("dummy_run", {"size": 3}),
        ("step_all", {"size": 3}),
        ("delete_output", {"choice": 0}),
        ("step_all", {"size": 2}),
    ),
)


#: The judge of each C check, made for a run: C1 that allowed changes are accepted, C2
#: that nothing is stale.
JUDGES: dict[str, Callable[[CheckRun], Judge]] = {
    "C1-changes-accepted": _judge_accepts,
    "C2-changes-never-stale": _judge_fresh,
}


def _run_change_lives(
    run: CheckRun, scripts: Sequence[tuple[tuple[str, dict[str, object]], ...]]
) -> None:
    run.build()  # a refused mode skips here, before Hypothesis starts
    run_lives(run, change_life(run, JUDGES[run.check_id](run)), scripts)


@check(
    "C1-changes-accepted",
    "MUST",
    "After any change SPEC C1 allows between steps (a list assigned or appended to, an item replaced with new data, an output stored, deleted, freed or put again directly), the target answers every gather that is due.",
    cross_cutting=True,
)
def _changes_accepted(run: CheckRun) -> None:
    _run_change_lives(run, _SCRIPTED_LIVES)


@check(
    "C2-changes-never-stale",
    "MUST",
    "After any sequence of changes SPEC C1 allows, every gather equals what a fresh state returns on the current cache: no row, piece or mask bit kept from before a change.",
    cross_cutting=True,
)
def _never_stale(run: CheckRun) -> None:
    _run_change_lives(run, _SCRIPTED_LIVES)
