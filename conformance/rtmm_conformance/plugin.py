"""The pytest plugin, ``pytest --conformance[=MODULE:FACTORY]``. Without the option it only
declares its options (it loads in every pytest run); with it, pytest runs the suite alone,
its items built directly (``rtmm-conformance::G5-rows-match-mask[realtime]``), not collected
from files that a project's settings could hide."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rtmm_conformance.console import NODE_PREFIX
from rtmm_conformance.settings import (
    DTYPE_NAMES,
    FAIL_ON,
    ISOLATIONS,
    REFERENCE_MODEL_STATE,
    USER_OPTIONS,
    RunSettings,
)
from rtmm_protocol.testing.model_configuration import CONFIG_OPTION, MODEL_ATTR_OPTION

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr
    from _pytest.terminal import TerminalReporter

    from rtmm_conformance.reporting.report import ConformanceReport
    from rtmm_conformance.results import CheckResult
    from rtmm_conformance.running.runner import PlannedCheck, SuiteRunner

__all__ = [
    "ConformanceItem",
    "pytest_addoption",
    "pytest_collection",
    "pytest_configure",
    "pytest_report_header",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]

_STATE = pytest.StashKey["_SuiteSession"]()
#: The user property that carries an item's verdict from an xdist worker to its controller,
#: as ``CheckResult.to_json()`` (the one place a result is written out as text).
_RECORD = "rtmm_result"
#: The defaults of every ``--conformance-KEY`` option that sets ``RunSettings.KEY``.
_DEFAULTS = RunSettings()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the ``--conformance`` options (the only thing done when they are not used)."""
    add = parser.getgroup("rtmm-conformance", "rtmm-protocol conformance suite").addoption
    # fmt: off
    add("--conformance", nargs="?", const=REFERENCE_MODEL_STATE, default=None,
        metavar="MODULE:FACTORY",
        help="run the conformance suite against FACTORY(ctx) (a ModelState or a runner-level "
        "gatherer); without a value, against the bundled reference. Write "
        "--conformance=MODULE:FACTORY: a bare --conformance takes the next argument")
    add("--conformance-device", default=None, metavar="DEVICE",
        help="device to build targets on (default: cuda where the checks run has one, else cpu)")
    add("--conformance-dtype", default=_DEFAULTS.dtype, choices=DTYPE_NAMES,
        help=f"dtype of the state's buffer (default: {_DEFAULTS.dtype})")
    add("--conformance-seed", type=int, default=_DEFAULTS.seed, metavar="N",
        help=f"seed of the random batches (default: {_DEFAULTS.seed}; printed in the header)")
    add("--conformance-examples", type=int, default=_DEFAULTS.examples, metavar="N",
        help=f"random examples per check and mode (default: {_DEFAULTS.examples})")
    add("--conformance-timeout", type=float, default=_DEFAULTS.timeout_s,
        metavar="SECONDS", dest="conformance_timeout_s",
        help=f"time limit of one check in one mode (default: {_DEFAULTS.timeout_s:g})")
    add("--conformance-strict", action="store_true", default=False,
        help="the strict profile: fail the run on robustness and SHOULD failures and on "
        "stale expected-failure entries too (the same as --conformance-fail-on=all)")
    add("--conformance-fail-on", default=None, choices=FAIL_ON,
        help="what fails the run: own (your own contract failures; the default for a target "
        "with a baseline, such as vllm:MODULE:CLASS), contract (every contract failure; the "
        "default otherwise) or all (robustness and SHOULD failures too)")
    add("--conformance-xfail", default=None, metavar="FILE",
        help="expected failures: one clause or check ID per line, then the reason")
    add("--conformance-report", default=None, metavar="PATH", help="write the JSON report to PATH")
    add("--conformance-isolation", default=_DEFAULTS.isolation, choices=ISOLATIONS,
        help="where checks run: process (a worker process, CUDA-safe: a crashing or hanging "
        "target fails one check and the run goes on), off (in the pytest process, for "
        "debugging), or auto (default: process, unless the factory cannot be sent to one)")
    add("--conformance-baseline", default=None, metavar="MODULE:FACTORY",
        help="what the target derives from: a failure it shares on the same draws is "
        "reported as inherited, not yours (a vllm:MODULE:CLASS target has one already)")
    add("--conformance-version", default=None, metavar="X",
        help="score against the requirement set of protocol version X (default: current)")
    add(CONFIG_OPTION, default=None, metavar="PATH", dest="conformance_model_config",
        help="the configuration of the model your state is built for, if it reads one when "
        "built (model.config, vLLM's model_config.hf_config / hf_text_config): a "
        "checkpoint's config.json or the folder holding it (its generation_config.json "
        "is read too); the toy model carries it, with the suite's hidden size, vocabulary "
        "and dtype (vLLM's own model states have theirs built in)")
    add(MODEL_ATTR_OPTION, action="append", default=None, metavar="NAME=VALUE",
        dest="conformance_model_attrs",
        help="an attribute of the model your state reads when built, for example "
        "token_lookback_depth=4 (VALUE is read as JSON, else as a string; NAME may be "
        "dotted: model.specialized_decode_config=null); repeat for several")
    # fmt: on


class _SuiteSession:
    """Per-process state of a conformance run: options, target, runner, collected results."""

    def __init__(self, config: pytest.Config) -> None:
        from rtmm_conformance.api import resolve_target
        from rtmm_conformance.driving.factories import FactoryNameError
        from rtmm_conformance.reporting.xfail import parse_xfail_file

        # ``getoption`` is untyped; argparse has converted and checked every value.
        option = config.getoption
        here = config.invocation_params.dir
        self.target_name = str(option("conformance"))
        # Options left unset (None) take the record's defaults.
        given: dict[str, Any] = {key: option(f"conformance_{key}") for key in USER_OPTIONS}
        try:
            self.settings = RunSettings(**{k: v for k, v in given.items() if v is not None})
            search = [here, config.rootpath]
            self.target = resolve_target(self.target_name, option("conformance_baseline"), search)
        except (FactoryNameError, ImportError) as error:
            raise pytest.UsageError(str(error)) from None
        except (ValueError, RuntimeError) as error:
            raise pytest.UsageError(f"--conformance options: {error}") from None
        xfail = option("conformance_xfail")
        try:
            self.xfail = parse_xfail_file(Path(here, xfail), xfail) if xfail else None
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
        self.selection = _node_selection(config)
        #: The (check, mode) items selected to run, as collected (by a worker under xdist).
        self.planned: list[tuple[str, str | None]] = []
        #: Whether this process is an xdist worker, whose verdicts its controller reports.
        self.in_worker = hasattr(config, "workerinput")
        self.records: list[CheckResult] = []
        self.report: ConformanceReport | None = None
        self._runner: SuiteRunner | None = None

    @property
    def runner(self) -> SuiteRunner:
        """The runner, made on first use (a usage error when the device asked for is missing)."""
        if self._runner is None:
            from rtmm_conformance.running.runner import open_runner

            try:
                self._runner = open_runner(self.target, self.settings)
            except ValueError as error:
                raise pytest.UsageError(f"--conformance options: {error}") from None
            self.settings = self._runner.settings
        return self._runner

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """In an xdist controller: note each check's verdict, which its worker sent."""
        record = next((str(v) for k, v in report.user_properties if k == _RECORD), None)
        if report.when == "call" and record is not None and not self.in_worker:
            from rtmm_conformance.results import CheckResult

            self.records.append(CheckResult.from_json(record))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        """In an xdist controller: what the workers will run (they all collect the same)."""
        by_node = {f"{NODE_PREFIX}::{p.label}": (p.impl.id, p.mode) for p in self.runner.plan()}
        self.planned = self.planned or [by_node[nodeid] for nodeid in ids]


def _node_selection(config: pytest.Config) -> list[str]:
    """The suite node IDs given as arguments; a usage error for anything else."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return []  # testpaths or the invocation directory: not the user's choice
    args = [str(a) for a in config.args]
    foreign = [a for a in args if a != NODE_PREFIX and not a.startswith(NODE_PREFIX + "::")]
    if foreign:
        raise pytest.UsageError(
            f"with --conformance pytest runs only the conformance suite, but got the "
            f"path(s) {', '.join(foreign)}. Select checks with -k (for example -k G5) or "
            f"by node ID ({NODE_PREFIX}::G5-rows-match-mask); run other tests in a "
            "separate pytest call. If you meant `pytest --conformance PATH`: a bare "
            "--conformance takes the next argument, so write --conformance=MODULE:FACTORY."
        )
    return args


def pytest_configure(config: pytest.Config) -> None:
    """Check the options and load the factory (usage errors stop the run here)."""
    if config.getoption("conformance", None) is None:
        return
    state = _SuiteSession(config)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "rtmm-conformance-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the worker process the run used."""
    state = config.stash.get(_STATE, None)
    if state is not None and state._runner is not None:
        state._runner.close()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """The target, seed and versions, so that a pasted log can be reproduced."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return None
    from rtmm_conformance.catalog import CHECKS, clauses_for
    from rtmm_conformance.clauses import KIND_NAMES, version_key

    runner = state.runner
    settings, probe, env = runner.settings, runner.probe, runner.environment
    if config.pluginmanager.has_plugin("dsession"):
        runner.close()  # an xdist controller runs no check: its workers have their own
    if probe.kind is None:
        target = f"{state.target_name} (kind unknown: {probe.note})"
        applies = "all clauses (the basic checks will say what is wrong)"
    else:
        target = f"{state.target_name} ({KIND_NAMES[probe.kind]})"
        own = list(clauses_for(probe.kind))
        other = [c for c in dict.fromkeys(c.clause for c in CHECKS) if c not in own]
        applies = ", ".join(own) + (
            f"; not applicable to this kind of target: {', '.join(other)}" if other else ""
        )
    newer = [c.id for c in CHECKS if version_key(c.since) > version_key(settings.version)]
    where = runner.notes[0] if runner.notes else "a worker process, reused for every check"
    return [
        "rtmm-protocol conformance suite",
        f"  target:   {target}",
        f"  clauses:  {applies}",
        f"  seed:     {settings.seed} (--conformance-seed)   examples: {settings.examples}   "
        f"timeout: {settings.timeout_s:g} s   fail on: {runner.fail_on} (--conformance-fail-on)",
        f"  protocol: {env['protocol']} (scored against the {settings.version} requirement set"
        + (f"; {len(newer)} newer checks not run" if newer else "")
        + ")",
        f"  versions: rtmm-protocol {env['rtmm_protocol']}, torch {env['torch']}, "
        f"Hypothesis {env.get('hypothesis', '?')}, CUDA {env['cuda']}, Python {env['python']}",
        f"  device:   {env['device']}, dtype {settings.dtype}",
        f"  isolation: {where}",
    ]


class _SuiteCollector(pytest.Collector):
    """The suite's one collector; its children are the checks, one per mode."""

    def collect(self) -> list[pytest.Item]:
        return [
            ConformanceItem.from_parent(self, name=planned.label, planned=planned)
            for planned in self.config.stash[_STATE].runner.plan()
        ]


class ConformanceItem(pytest.Item):
    """One check in one mode."""

    def __init__(self, *, planned: PlannedCheck, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]  # pytest's node keywords
        self.planned = planned
        info = planned.impl.info
        self.user_properties.extend([("clause", info.clause), ("level", info.level)])

    def runtest(self) -> None:
        """Run the check (or fetch its result) and turn the verdict into pytest's terms."""
        from rtmm_conformance.console import rerun_command
        from rtmm_conformance.pytest_outcome import run_item
        from rtmm_conformance.reporting.causes import key_digest

        state = self.config.stash[_STATE]

        def record(result: CheckResult) -> None:
            if state.in_worker:
                self.user_properties.append((_RECORD, result.to_json()))
            else:
                state.records.append(result)
            if result.cause_keys:
                cause = f"{key_digest(result.cause_keys)}: {result.cause_title}"
                self.user_properties.append(("cause", cause))

        runner = state.runner
        settings = runner.settings
        rerun = rerun_command(
            state.target_name, settings.seed, str(settings.device), self.name, dtype=settings.dtype
        )
        run_item(runner, self.planned, state.xfail, rerun=rerun, record=record)

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: object = None
    ) -> str | TerminalRepr:
        """The check's own explanation; a traceback only for errors of the suite itself."""
        from rtmm_conformance.pytest_outcome import ConformanceFailedError

        if isinstance(excinfo.value, ConformanceFailedError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where the check is: its function's file and line, and its ID as the test name."""
        import inspect

        impl = self.planned.impl
        code = impl.example or impl.run
        try:
            source = inspect.getsourcefile(code)
            line = inspect.getsourcelines(code)[1] - 1
        except (OSError, TypeError):
            return self.path, 0, self.name
        return (Path(source) if source else self.path), line, self.name


def pytest_collection(session: pytest.Session) -> bool | None:
    """Collect the suite instead of files (not in an xdist controller: workers collect)."""
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None or config.pluginmanager.has_plugin("dsession"):
        return None  # the xdist controller collects nothing; its workers do
    suite = _SuiteCollector.from_parent(session, name=NODE_PREFIX, nodeid=NODE_PREFIX)
    items = list(session.genitems(suite))
    if state.selection:
        items = [i for i in items if any(_picks(w, i.nodeid) for w in state.selection)]
    session.items = items
    config.hook.pytest_collection_modifyitems(session=session, config=config, items=items)
    state.planned = [
        (i.planned.impl.id, i.planned.mode) for i in items if isinstance(i, ConformanceItem)
    ]
    config.hook.pytest_collection_finish(session=session)
    session.testscollected = len(items)
    return True


def _picks(wanted: str, nodeid: str) -> bool:
    return nodeid == wanted or wanted == NODE_PREFIX or nodeid.startswith(wanted + "[")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Build the report, write the JSON file, and set the exit status of runs that are
    incomplete, or that fail by ``--conformance-fail-on`` though no item failed."""
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None or hasattr(config, "workerinput") or not (state.records or state.planned):
        return  # under xdist the controller alone writes the report
    from rtmm_conformance.reporting.report import build_report
    from rtmm_conformance.results import CheckResult, Outcome

    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    stopped = "the run stopped before this check (-x, --maxfail, or a lost worker)"
    why = "not run: " + ("the run was interrupted" if interrupted else stopped)
    seen = {(r.check_id, r.mode) for r in state.records}
    missing = [
        CheckResult(c, m, Outcome.NOT_RUN, why) for c, m in state.planned if (c, m) not in seen
    ]
    report = build_report(
        state.runner, [*state.records, *missing], state.xfail, interrupted=interrupted
    )
    state.report = report
    path = config.getoption("conformance_report")
    if path:
        report.write_json(Path(config.invocation_params.dir, path))
    if session.exitstatus == 0 and not report.complete:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    # Blocked checks and (strict) stale entries fail the run though no item failed.
    if report.fails_run and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(
    terminalreporter: TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """The per-check table and the summary line."""
    state = config.stash.get(_STATE, None)
    if state is None or state.report is None:
        return
    report, write = state.report, terminalreporter.write_line
    if should := report.should_details():
        terminalreporter.write_sep(
            "=", "SHOULD failures (warnings; --conformance-strict fails them)"
        )
        write(should)
    terminalreporter.write_sep("=", "rtmm-protocol conformance")
    write(report.table())
    if causes := report.causes_text():
        write("\n" + causes)
    write(report.item_line())
    path = config.getoption("conformance_report")
    if path:
        write(f"JSON report: {Path(config.invocation_params.dir, path)}")
    write(report.summary_line(), bold=True, red=not report.ok)
