"""The stateful check: one target through a whole life, compared with the oracle at each step.

A Hypothesis state machine drives the target and the oracle through the same events:
requests added and removed, prompts processed in chunks, realtime streams appending
features and decoding, encoder outputs cached and freed, dummy runs in between. After
every gather the two must agree exactly, and the cache must be as it was. Single-call
checks build a fresh target per example; this one finds what a target keeps between
calls and gets wrong later (a memoized plan that is not invalidated, say).

A failure shows the shortest sequence of events as Python that replays it through
:func:`life_machine`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    PRECONDITIONS_MARKER,
    RULE_MARKER,
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rtmm_conformance.checks.registry import check
from rtmm_conformance.driving.check_run import Built, CheckRun
from rtmm_conformance.driving.gather_call import GatherCall, call_gather, describe_error
from rtmm_conformance.driving.model_inputs import capture_inputs, has_hooks
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec, distinct_output
from rtmm_protocol.testing.snapshots import CacheSnapshot

__all__ = [
    "FEATURE_SHAPES",
    "FeatureShape",
    "Judge",
    "LiveRequest",
    "compare_with_oracle",
    "life_machine",
    "replay_preamble",
    "replayable",
    "run_lives",
    "when",
]

#: Judges one gather of a life against the oracle; raises ``CheckFailure`` on a fault.
Judge = Callable[[GatherCall], None]

#: ``(gap before it, length, is_embed or None, cached at once)`` of a new feature.
FeatureShape = tuple[int, int, tuple[bool, ...] | None, bool]

FEATURE_SHAPES: st.SearchStrategy[FeatureShape] = st.integers(1, 6).flatmap(
    lambda n: st.tuples(
        st.integers(0, 4),
        st.just(n),
        st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(tuple),
        st.sampled_from([True, True, True, False]),
    )
)
_prompt_shapes = st.tuples(st.integers(0, 20), st.lists(FEATURE_SHAPES, max_size=3))
_choice = st.integers(0, 1000)


@dataclass
class LiveRequest:
    prefill_len: int
    computed: int = 0
    features: list[FeatureSpec] = field(default_factory=list)

    @property
    def end(self) -> int:
        return max((f.offset + f.length for f in self.features), default=0)


def life_machine(
    run: CheckRun, *, judge: Judge | None = None, keeps_cache: bool = True
) -> type[RuleBasedStateMachine]:
    """The state-machine class that drives targets built by ``run`` (one per life).

    ``judge`` compares each gather with the oracle (default: exactly, or the contract's
    error for a missing output); ``keeps_cache`` also requires the cache unchanged by
    each gather (G8).
    """
    judge_call = compare_with_oracle if judge is None else judge
    top = run.settings.max_num_tokens
    max_requests = run.settings.max_num_reqs
    hidden = run.settings.hidden_size
    with_dummy = run.kind == "model_state"

    class GatherLife(RuleBasedStateMachine):
        """Requests come and go, prompts are chunked, streams grow, outputs are freed."""

        #: The replay's first lines: rebuild this machine class for the failing target.
        replay_header = replay_preamble(run, "life_machine_for")

        def __init__(self) -> None:
            super().__init__()
            self.steps: list[str] = []
            self.depth = 0
            self.built: Built = run.build()
            self.requests: dict[str, LiveRequest] = {}
            self.ordinals: dict[str, int] = {}
            self.counter = 0
            #: The first dummy run's tensor, kept alive for the life: while it lives, no
            #: other tensor can be given its storage's address.
            self.first_dummy: torch.Tensor | None = None

        # -------------------------------------------------------------- events

        def _new_feature(self, offset: int, shape: FeatureShape) -> FeatureSpec:
            _, length, mask, cached = shape
            identifier = f"q{self.counter}"
            self.ordinals[identifier] = self.counter
            self.counter += 1
            return FeatureSpec(identifier, offset, length, mask, cached)

        def _cache(self, spec: FeatureSpec) -> None:
            output = distinct_output(self.ordinals[spec.identifier], spec.num_embeds, hidden)
            cache = self.built.cache
            with cache.paused():
                cache.encoder_outputs[spec.identifier] = output.to(run.device)

        @initialize(prompts=st.lists(_prompt_shapes, min_size=1, max_size=3))
        @replayable
        def start(self, prompts: list[tuple[int, list[FeatureShape]]]) -> None:
            for prefill_len, shapes in prompts:
                self.add_request(prefill_len, shapes)

        @precondition(when(lambda self: len(self.requests) < max_requests))
        @rule(prefill_len=st.integers(0, 20), shapes=st.lists(FEATURE_SHAPES, max_size=3))
        @replayable
        def add_request(self, prefill_len: int, shapes: list[FeatureShape]) -> None:
            self._register(prefill_len, shapes, self.built.cache.add_request)

        def _register(
            self,
            prefill_len: int,
            shapes: list[FeatureShape],
            store: Callable[[str, list[MultiModalFeature]], None],
        ) -> None:
            """A new request with features laid out by ``shapes``, handed to ``store``."""
            req_id = f"req-{self.counter}"
            self.counter += 1
            request = LiveRequest(prefill_len)
            cursor = 0
            for shape in shapes:
                spec = self._new_feature(cursor + shape[0], shape)
                request.features.append(spec)
                cursor = spec.offset + spec.length
            with self.built.cache.paused():
                store(req_id, [f.build() for f in request.features])
            for spec in request.features:
                if spec.cached:
                    self._cache(spec)
            self.requests[req_id] = request

        @precondition(when(lambda self: bool(self.requests)))
        @rule(choice=_choice, shape=FEATURE_SHAPES)
        @replayable
        def append_feature(self, choice: int, shape: FeatureShape) -> None:
            req_id = sorted(self.requests)[choice % len(self.requests)]
            request = self.requests[req_id]
            spec = self._new_feature(max(request.end, request.computed) + shape[0], shape)
            with self.built.cache.paused():
                self.built.cache.append_feature(req_id, spec.build())
            request.features.append(spec)
            if spec.cached:
                self._cache(spec)

        def _uncached(self) -> list[FeatureSpec]:
            outputs = self.built.cache.encoder_outputs
            return [
                f
                for r in self.requests.values()
                for f in r.features
                if not dict.__contains__(outputs, f.identifier)
            ]

        @precondition(when(lambda self: bool(self._uncached())))
        @rule(choice=_choice)
        @replayable
        def cache_output(self, choice: int) -> None:
            missing = self._uncached()
            self._cache(missing[choice % len(missing)])

        @precondition(when(lambda self: bool(dict.__len__(self.built.cache.encoder_outputs))))
        @rule(choice=_choice)
        @replayable
        def free_output(self, choice: int) -> None:
            cache = self.built.cache
            with cache.paused():
                cached = sorted(dict.keys(cache.encoder_outputs))
                cache.free_encoder_output(cached[choice % len(cached)])

        @precondition(when(lambda self: bool(self.requests)))
        @rule(choice=_choice, free=st.booleans())
        @replayable
        def remove_request(self, choice: int, free: bool) -> None:
            req_id = sorted(self.requests)[choice % len(self.requests)]
            request = self.requests.pop(req_id)
            cache = self.built.cache
            with cache.paused():
                cache.remove_request(req_id)
                if free:
                    for spec in request.features:
                        cache.free_encoder_output(spec.identifier)

        @precondition(when(lambda self: bool(self.requests)))
        @rule(
            choices=st.lists(_choice, min_size=1, max_size=4),
            sizes=st.lists(st.integers(1, 8), min_size=4, max_size=4),
            lookahead=st.sampled_from([0, 0, 1, 2]),
        )
        @replayable
        def step(self, choices: list[int], sizes: list[int], lookahead: int) -> None:
            self._step(choices, sizes, lookahead)

        @precondition(when(lambda self: bool(self.requests)))
        @rule(size=st.integers(1, 8))
        @replayable
        def step_all(self, size: int) -> None:
            """Every live request in one batch: the engine's usual step."""
            count = len(self.requests)
            self._step(list(range(count)), [size] * count, 0)

        def _step(self, choices: list[int], sizes: list[int], lookahead: int) -> None:
            ids = sorted(self.requests)
            picked = list(dict.fromkeys(ids[c % len(ids)] for c in choices))
            specs = []
            for req_id, size in zip(picked, sizes, strict=False):
                request = self.requests[req_id]
                left = request.prefill_len - request.computed
                count = min(size, left) if left > 0 else min(size, 2)
                specs.append(
                    RequestSpec(
                        req_id,
                        request.prefill_len,
                        request.computed,
                        count,
                        tuple(request.features),
                    )
                )
            scenario = GatherScenario(
                requests=tuple(specs), hidden_size=hidden, draft_lookahead=lookahead
            )
            if scenario.num_tokens > top:
                return
            cache = self.built.cache
            before = CacheSnapshot.take(cache)
            call = call_gather(
                self.built.target,
                self.built.kind,
                self.built.model,
                cache,
                scenario,
                run.device,
            )
            try:
                judge_call(call)
            except CheckFailure as failure:  # this step's scenario is the case that shows it
                failure.case, failure.realtime = scenario, run.mode == "realtime"
                raise
            changes = before.changes(cache) if keeps_cache else []
            if changes:
                raise CheckFailure(
                    "a gather changed the encoder cache",
                    expected="the cache as it was",
                    seen="; ".join(changes[:3]),
                )
            for spec in specs:
                self.requests[spec.req_id].computed += spec.num_scheduled_tokens

        @precondition(when(lambda self: with_dummy))
        @rule(size=st.integers(0, top))
        @replayable
        def dummy_run(self, size: int) -> None:
            target = self.built.target
            log = self.built.encoder_log
            cache = self.built.cache
            calls = len(log.calls)
            cache.forget()
            if has_hooks(target):
                size = max(size, 1)  # a runner captures no graph of zero tokens
            inputs = capture_inputs(run, target, size)
            view = inputs.tensor()
            if view is None:
                raise CheckFailure(
                    f"a dummy run ({inputs.through}) handed the model no inputs_embeds",
                    expected=f"a ({size}, {hidden}) view of the buffer",
                    seen=type(inputs.inputs_embeds).__name__,
                )
            if self.first_dummy is None:
                self.first_dummy = view
            first = self.first_dummy.untyped_storage().data_ptr()
            if view.untyped_storage().data_ptr() != first:
                raise CheckFailure(
                    "a dummy run returned another buffer later in the state's life",
                    expected="the same storage for every dummy run",
                    seen="a different storage",
                )
            if len(log.calls) != calls or cache.touched:
                raise CheckFailure(
                    "a dummy run in the middle of the state's life ran the encoder or used the cache",
                    expected="no encoder call, no cache access",
                    seen=f"{len(log.calls) - calls} encoder call(s), cache "
                    f"{'touched' if cache.touched else 'untouched'}",
                )

    return GatherLife


def compare_with_oracle(call: GatherCall) -> None:
    oracle = call.oracle
    if oracle.raises:
        missing = [identifier for identifier, _ in oracle.missing]
        if not isinstance(call.error, RuntimeError) or not any(
            i in str(call.error) for i in missing
        ):
            raise CheckFailure(
                "a missing encoder output was not reported as the contract says",
                expected=f"a RuntimeError naming {' or '.join(missing)}",
                seen="a result" if call.error is None else describe_error(call.error),
            ) from call.error
        return
    if call.error is not None:
        raise CheckFailure(
            "the gather raised although every needed output is cached",
            expected="a result",
            seen=describe_error(call.error),
        ) from call.error
    gathered = call.unpack()
    expected_mask = oracle.mask_tensor()
    raw = gathered.raw_mask
    if tuple(raw.shape) != (call.total,) or not comparisons.equal(gathered.mask, expected_mask):
        diff = comparisons.nonzero(comparisons.ne(expected_mask, gathered.mask)).flatten().tolist()
        raise CheckFailure(
            "the mask differs from the oracle's",
            expected=f"{call.total} entries, True at "
            f"{comparisons.nonzero(expected_mask).flatten().tolist()[:12]}",
            seen=f"{raw.shape[0]} entries, differing at {call.describe_slots(diff)}"
            if diff
            else f"shape {tuple(raw.shape)}",
        )
    rows = gathered.rows(call.scenario.hidden_size)
    expected = call.expected_rows()
    if rows.shape != expected.shape or not comparisons.equal(rows, expected):
        wanted = [f"{r.identifier}[{r.row}]" for r in oracle.rows]
        first = next(
            (
                j
                for j in range(min(rows.shape[0], expected.shape[0]))
                if not comparisons.equal(rows[j], expected[j])
            ),
            min(rows.shape[0], expected.shape[0]),
        )
        source = call.source_of(rows[first]) if first < rows.shape[0] else None
        got = (
            "missing"
            if first >= rows.shape[0]
            else "values no cached output has (kept from earlier?)"
            if source is None
            else f"{source[0]}[{source[1]}]"
        )
        raise CheckFailure(
            "the gathered rows differ from the oracle's",
            expected=f"{expected.shape[0]} rows: {', '.join(wanted[:8])}"
            + (" ..." if len(wanted) > 8 else ""),
            seen=f"{rows.shape[0]} rows; row {first} (for {wanted[first] if first < len(wanted) else 'no slot'}) is {got}",
        )


#: Hand-written lives run before the random ones, each a list of ``(rule, arguments)``:
#: a stream that grows while the prompt is still being processed, then decodes, with two
#: dummy runs of one size in between (the second must hand out the first one's buffer,
#: not a copy at the address of a freed one); and requests that come and go while outputs
#: are freed and cached again.
_SCRIPTED_LIVES: tuple[tuple[tuple[str, dict[str, object]], ...], ...] = (
    (
        ("start", {"prompts": [(12, [(0, 3, None, True)])]}),
        ("step_all", {"size": 2}),
        ("append_feature", {"choice": 0, "shape": (0, 2, (True, False), True)}),
        ("dummy_run", {"size": 3}),
        ("step_all", {"size": 4}),
        ("append_feature", {"choice": 0, "shape": (1, 3, None, True)}),
        ("dummy_run", {"size": 3}),
        ("step", {"choices": [0], "sizes": [8, 0, 0, 0], "lookahead": 1}),
        ("step_all", {"size": 2}),
    ),
    (
        ("start", {"prompts": [(6, [(1, 2, None, True)]), (9, [(0, 4, None, False)])]}),
        ("step_all", {"size": 3}),
        ("cache_output", {"choice": 0}),
        ("step_all", {"size": 3}),
        ("free_output", {"choice": 0}),
        ("remove_request", {"choice": 0, "free": True}),
        ("add_request", {"prefill_len": 5, "shapes": [(2, 2, None, True)]}),
        ("step_all", {"size": 5}),
    ),
)


def _run_script(
    machine_class: type[RuleBasedStateMachine],
    script: Sequence[tuple[str, dict[str, object]]],
    with_dummy: bool,
) -> None:
    """Live one hand-written life; a failure carries its steps (see :func:`replayable`). A
    step whose precondition does not hold is left out, as Hypothesis would: a target that
    changes the cache itself (freeing outputs, say) can leave a scripted step nothing to do."""
    machine = machine_class()
    for rule_name, arguments in script:
        step = getattr(machine, rule_name)
        # A precondition on a rule is kept in the rule's record (Hypothesis 6.100 and later).
        record = getattr(step, RULE_MARKER, None)
        tests = getattr(record, "preconditions", ()) or getattr(step, PRECONDITIONS_MARKER, ())
        holds = all(test(machine) for test in tests)
        if holds and (rule_name != "dummy_run" or with_dummy):
            step(**arguments)


@check(
    "G8-stateful-life-matches-oracle",
    "MUST",
    "Through requests added and removed, chunked prompts, streamed features, outputs cached and freed and dummy runs in between, every gather equals the oracle.",
    cross_cutting=True,
)
def _stateful_life(run: CheckRun) -> None:
    run.build()  # a refused mode skips here, before Hypothesis starts
    run_lives(run, life_machine(run), _SCRIPTED_LIVES)


def run_lives(
    run: CheckRun,
    machine_class: type[RuleBasedStateMachine],
    scripts: Sequence[Sequence[tuple[str, dict[str, object]]]],
) -> None:
    """Run the hand-written lives, then random ones; a failure carries its steps."""
    for script in scripts:
        try:
            _run_script(machine_class, script, run.kind == "model_state")
        except CheckFailure as failure:
            replay = failure.replay or ""
            count = sum(1 for line in replay.splitlines() if line.startswith("state."))
            failure.context = (
                f"(a hand-written life, failing at its step {count}: the replay's last line)"
            )
            failure.replay = replay
            raise
    if run.settings.examples <= 0:
        return
    with run.deterministic("these steps"):
        run_state_machine_as_test(
            seed(run.example_seed())(machine_class),
            settings=run.hypothesis_settings(run.settings.examples, stateful_step_count=25),
        )


def replay_preamble(run: CheckRun, replayer: str) -> list[str]:
    """The lines that rebuild the machine of ``run``'s check for its target, in this process."""
    which = "" if replayer == "life_machine_for" else f"check_id={run.check_id!r}, "
    return [
        f"from rtmm_conformance import {replayer}",
        f"GatherLife = {replayer}({run.factory_name!r}, {which}mode={run.mode!r}, "
        f"device={str(run.device)!r})",
        "state = GatherLife()",
    ]


_Rule = TypeVar("_Rule", bound=Callable[..., None])


def when(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A rule's precondition under a name: Hypothesis before 6.10x read a lambda's source
    at every draw to describe it, which made long lives take minutes."""

    def precondition_holds(machine: Any) -> bool:
        return test(machine)

    return precondition_holds


def replayable(method: _Rule) -> _Rule:
    """Record each call of a rule as a line of Python; a failure carries the lines so far.

    Hypothesis replays the smallest failing life last, so the failure that comes out of a
    run holds exactly its steps, whatever Hypothesis itself prints (that changed between
    versions). Only the outermost call is recorded (a rule may call another).
    """

    signature = inspect.signature(method)

    @functools.wraps(method)
    def recorded(self: Any, *args: object, **kwargs: object) -> None:
        if self.depth == 0:
            named = signature.bind(self, *args, **kwargs).arguments
            listed = ", ".join(f"{k}={v!r}" for k, v in list(named.items())[1:])
            self.steps.append(f"state.{method.__name__}({listed})")
        self.depth += 1
        try:
            method(self, *args, **kwargs)
        except CheckFailure as failure:
            if self.depth == 1 and failure.replay is None:
                failure.replay = "\n".join([*self.replay_header, *self.steps])
            raise
        finally:
            self.depth -= 1

    return recorded  # type: ignore[return-value]  # same signature, recorded
