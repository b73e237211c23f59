"""``python -m benchmarks --against REV``: the reference at a git revision against the working tree's.

REV is checked out into a temporary git worktree (removed again however the run ends).
Two worker processes build the same workloads, one importing the package from that
worktree and one from the working tree, and take turns: for every workload, path and
round, one side times a burst of calls while the other waits, then the other side
does, the order alternating round by round. Each round gives a new/old ratio per path:
the old side's median time over the new side's (above 1: the working tree is faster);
the table shows the median ratio over the rounds and its spread (lowest to highest).

Two processes rather than one: the old package imports itself as ``rtmm_protocol``
(absolute imports throughout, classes that the validation checks by identity), so
loading it under another name in the same process would mean rewriting its imports
or swapping ``sys.modules`` around every call. Separate processes each import one
complete, unmodified package; only one of them runs at a time, so neither competes
with the other for a core, and the timings are taken inside each process (the pipe
between them is never timed).

Before timing, every step's outputs of every path are compared between the two sides,
exactly (they are copies of the same cached rows): list form (pieces, their modality,
mask), plan + rows, the plan's mask and the whole step's buffer. The exit status is 1
if any differ, 2 if REV does not resolve to a commit.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.workloads import named_loop_workloads

ROOT = Path(__file__).resolve().parents[1]
#: The paths timed on each side, in table order.
PATHS = {
    "list": "gather_mm_embeddings: list of views and mask",
    "rows": "plan_mm_gather, then rows() into a reused buffer (plan + rows)",
    "step": "get_mm_embeddings: the whole real step, merge included",
    "plan": "plan_mm_gather alone",
}
MIN_ROUNDS = 3
#: Calls per burst when each is timed cold (after a copy that evicts the CPU caches).
COLD_CALLS = 9

# Started with ``python -c``: the package under test is imported first, from its own
# root, then the benchmark code from the working tree. A package's submodules are found
# through its own ``__path__``, so everything the old package imports later is its own.
_BOOTSTRAP = """
import sys
package_root, bench_root = sys.argv[1], sys.argv[2]
sys.path.insert(0, package_root)
import rtmm_protocol
sys.path.remove(package_root)
sys.path.insert(0, bench_root)
from benchmarks.against import serve
serve(package_root)
"""


class RevisionError(ValueError):
    """REV names no commit of the repository."""


# ---------------------------------------------------------------- worker side


def _adapt_old_api() -> None:
    """Older revisions (0e83daa and before) export the input batch and toy models from
    ``rtmm_protocol.reference`` and have no ``rtmm_protocol.testing``: alias them there."""
    try:
        import rtmm_protocol.testing  # noqa: F401
    except ImportError:
        import rtmm_protocol.reference as reference

        shim = types.ModuleType("rtmm_protocol.testing")
        for name in ("ReferenceInputBatch", "ToyRealtimeModel", "ToyReplaceModel"):
            setattr(shim, name, getattr(reference, name))
        sys.modules["rtmm_protocol.testing"] = shim


class _Side:
    """One workload on one side: its steps and the reference's paths over them."""

    def __init__(self, spec: tuple[str, int, int, str, str]) -> None:
        import torch

        from benchmarks.reference_side import ReferenceSide, toy_model
        from benchmarks.scenarios import NUM_STEPS

        builder, hidden, quick, dtype, device = spec
        build = named_loop_workloads(bool(quick))[builder]
        workload = build(hidden, getattr(torch, dtype), torch.device(device))
        self.name = workload.name
        self.model = toy_model(workload)
        self.side = ReferenceSide(workload, self.model, max(1, workload.num_tokens))
        self.args = [workload.gather_args(k) for k in range(NUM_STEPS)]
        self.batches = [workload.input_batch(k) for k in range(NUM_STEPS)]
        self.current = 0
        side, runner = self.side, self.side.runner
        self.paths: dict[str, Callable[[], object]] = {
            "list": lambda: side.gather(self.batches[self.current]),
            "rows": lambda: side.rows(self.args[self.current]),
            "step": lambda: side.step(self.batches[self.current]),
            "plan": lambda: runner.plan_mm_gather(*self.args[self.current]),
        }
        self.sync: Callable[[], None] = (
            torch.cuda.synchronize if workload.device.type == "cuda" else _no_sync
        )
        self.evict: Callable[[], None] | None = None  # made when a cold timing asks

    def outputs(self) -> list[dict[str, Any]]:
        """Every path's output on every step, as CPU values."""
        found = []
        for k in range(len(self.args)):
            self.current = k
            pieces, mask = self.side.gather(self.batches[k])
            plan = self.side.runner.plan_mm_gather(*self.args[k])
            step = self.side.step(self.batches[k])
            found.append(
                {
                    "pieces": [p.cpu().clone() for p in pieces],
                    "modalities": [getattr(p, "modality", None) for p in pieces],
                    "mask": mask.cpu().clone(),
                    "plan_mask": plan.is_mm_embed.cpu().clone(),
                    "rows": self.side.rows(self.args[k]).cpu().clone(),
                    "step": None if step is None else step.cpu().clone(),
                }
            )
        return found

    def time(self, path: str, calls: int, cold: bool = False) -> list[float]:
        """Seconds per call of ``path``, over ``calls`` calls cycling through the steps;
        ``cold``: each after a copy that evicts the CPU caches (untimed)."""
        from benchmarks.timing import Eviction

        if cold and self.evict is None:
            self.evict = Eviction("cold")
        fn, sync = self.paths[path], self.sync
        evict = self.evict if cold else None
        samples = []
        enabled = gc.isenabled()
        gc.disable()  # as benchmarks.timing.alternate: no collection lands on one call
        try:
            for k in range(calls):
                self.current = k % len(self.args)
                if evict is not None:
                    evict()
                sync()
                t0 = time.perf_counter_ns()
                result = fn()
                sync()
                samples.append((time.perf_counter_ns() - t0) * 1e-9)
                del result
                bytearray(1 << 13)  # merge freed blocks untimed (see benchmarks.timing)
        finally:
            if enabled:
                gc.enable()
        return samples


def _no_sync() -> None:
    pass


def serve(package_root: str) -> None:
    """The worker's loop: answer pickled requests on stdin, on the real stdout."""
    import torch

    import rtmm_protocol

    where = Path(rtmm_protocol.__file__).resolve()
    if not where.is_relative_to(Path(package_root).resolve()):
        raise SystemExit(f"imported rtmm_protocol from {where}, not from {package_root}")
    _adapt_old_api()
    torch.set_num_threads(int(os.environ.get("RTMM_BENCH_THREADS", "1")))
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # prints must not corrupt the replies
    side: _Side | None = None
    while True:
        try:
            command, argument = pickle.load(requests)
        except EOFError:
            return
        try:
            if command == "load":
                side = None
                gc.collect()
                side = _Side(argument)
                reply: object = side.name
            elif command == "outputs":
                assert side is not None
                reply = side.outputs()
            elif command == "time":
                assert side is not None
                reply = side.time(*argument)
            else:
                return
        except Exception as error:  # sent back: the coordinator reports it
            reply = RuntimeError(f"{type(error).__name__}: {error}")
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()


# ---------------------------------------------------------------- coordinator side


class _Worker:
    def __init__(self, label: str, package_root: Path, env: dict[str, str]) -> None:
        self.label = label
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(package_root), str(ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=package_root,
            env=env,
        )

    def send(self, command: str, argument: object = None) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        pickle.dump((command, argument), stdin, protocol=pickle.HIGHEST_PROTOCOL)
        stdin.flush()

    def receive(self) -> Any:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        try:
            reply = pickle.load(stdout)
        except EOFError:
            raise RuntimeError(f"the {self.label} side's worker exited") from None
        if isinstance(reply, RuntimeError):
            raise RuntimeError(f"the {self.label} side: {reply}")
        return reply

    def ask(self, command: str, argument: object = None) -> Any:
        self.send(command, argument)
        return self.receive()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("quit")
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def resolve(rev: str, repo: Path = ROOT) -> str:
    """The commit ``rev`` names in ``repo``; :class:`RevisionError` if none."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise RevisionError(f"--against {rev!r}: no such commit in {repo}")
    return found.stdout.strip()


@contextlib.contextmanager
def checkout(commit: str, repo: Path = ROOT) -> Iterator[Path]:
    """``commit`` in a temporary git worktree, removed (and pruned) on the way out."""
    folder = Path(tempfile.mkdtemp(prefix="rtmm-against-"))
    tree = folder / "tree"
    try:
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(tree), commit],
            cwd=repo,
            check=True,
            capture_output=True,
        )
        yield tree
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(tree)], cwd=repo, capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)


@dataclass
class AgainstResult:
    """One workload: per path, each round's new/old ratio and both sides' medians (us)."""

    name: str
    outputs_match: bool
    ratios: dict[str, list[float]] = field(default_factory=dict)
    old_us: dict[str, list[float]] = field(default_factory=dict)
    new_us: dict[str, list[float]] = field(default_factory=dict)

    def ratio(self, path: str) -> float:
        """The median over the rounds of new/old (old time over new time)."""
        return statistics.median(self.ratios[path])


def _same(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """The (step, output) pairs that differ; copies of the same rows agree exactly."""
    import torch

    def equal(a: object, b: object) -> bool:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(map(equal, a, b))
        return a == b

    return [
        f"step {k} {name}"
        for k, (a, b) in enumerate(zip(old, new, strict=True))
        for name in a
        if not equal(a[name], b[name])
    ]


def measure(
    old: _Worker,
    new: _Worker,
    spec: tuple[str, int, int, str, str],
    *,
    rounds: int,
    burst_s: float,
    progress: Callable[[str], None],
    cold: bool = False,
) -> AgainstResult:
    """Compare both sides' outputs on ``spec``'s workload, then time it in turns."""
    for worker in (old, new):  # both build at once (two processes)
        worker.send("load", spec)
    name = old.receive()
    new.receive()
    progress(f"{name}: comparing outputs")
    old.send("outputs")
    new.send("outputs")
    differ = _same(old.receive(), new.receive())
    if differ:
        progress(f"    outputs differ: {', '.join(differ[:6])}")
    result = AgainstResult(name, not differ)
    for path in PATHS:
        # Calls per burst: warm both sides up, then fit the burst to burst_s.
        first = [sum(w.ask("time", (path, 8, cold))) / 8 for w in (old, new)]
        calls = max(8, min(2000, int(burst_s / max(max(first), 1e-7))))
        if cold:  # each call follows a copy of tens of milliseconds: a fixed, small burst
            calls = COLD_CALLS
        for index in range(rounds):
            order = (old, new) if index % 2 == 0 else (new, old)
            timed = {w.label: w.ask("time", (path, calls, cold)) for w in order}
            medians = {label: statistics.median(samples) for label, samples in timed.items()}
            result.old_us.setdefault(path, []).append(medians["old"] * 1e6)
            result.new_us.setdefault(path, []).append(medians["new"] * 1e6)
            result.ratios.setdefault(path, []).append(medians["old"] / medians["new"])
    progress(
        "    new/old: "
        + ", ".join(f"{p} {result.ratio(p):.2f}" for p in PATHS)
        + f"; outputs match: {result.outputs_match}"
    )
    return result


def records(results: Sequence[AgainstResult]) -> list[dict[str, object]]:
    """One flat record per workload and path, for the JSON file the docs render."""
    found: list[dict[str, object]] = []
    for result in results:
        for path in PATHS:
            ratios = result.ratios[path]
            found.append(
                {
                    "workload": result.name,
                    "path": path,
                    "new_over_old": round(result.ratio(path), 3),
                    "spread": f"{min(ratios):.2f}-{max(ratios):.2f}",
                    "old_ms": round(statistics.median(result.old_us[path]) / 1e3, 4),
                    "new_ms": round(statistics.median(result.new_us[path]) / 1e3, 4),
                    "rounds": len(ratios),
                    "outputs_match": result.outputs_match,
                }
            )
    return found


def table(results: Sequence[AgainstResult], old_label: str) -> str:
    """Plain-text table: per workload and path, new/old (median, spread) and both medians."""
    header = ("workload", "path", "new/old", "spread", f"old ({old_label}) ms", "new ms")
    lines: list[tuple[str, ...]] = [header]
    for result in results:
        for k, path in enumerate(PATHS):
            ratios = result.ratios[path]
            lines.append(
                (
                    result.name if k == 0 else "",
                    path,
                    f"{result.ratio(path):.2f}",
                    f"{min(ratios):.2f}-{max(ratios):.2f}",
                    f"{statistics.median(result.old_us[path]) / 1e3:.3f}",
                    f"{statistics.median(result.new_us[path]) / 1e3:.3f}",
                )
            )
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]

    def cell(c: int, text: str) -> str:  # names left, numbers right
        return text.ljust(widths[c]) if c < 2 else text.rjust(widths[c])

    return "\n".join("  ".join(cell(c, text) for c, text in enumerate(line)) for line in lines)


def run_against(
    rev: str,
    *,
    quick: bool,
    rounds: int = 5,
    budget_s: float | None = None,
    hidden_size: int | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    threads: int = 1,
    workloads: Sequence[str] | None = None,
    repo: Path = ROOT,
    package_root: Path | None = None,
    cold: bool = False,
) -> tuple[list[AgainstResult], str]:
    """Time the reference at ``rev`` (old) against the one under ``package_root``
    (new; default: the working tree). Returns the results and the text table.
    ``cold``: every call after a copy that evicts the CPU caches, as an engine's forward
    pass between two steps does (see :mod:`benchmarks.step_profile`)."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"--rounds must be at least {MIN_ROUNDS}, got {rounds}")
    commit = resolve(rev, repo)
    hidden = hidden_size or (128 if quick else 1280)
    known = named_loop_workloads(quick)
    names = list(workloads or known)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; known: {sorted(known)}")
    per_workload = budget_s if budget_s is not None else (0.02 if quick else 4.0)
    burst_s = per_workload / (rounds * len(PATHS) * 2)
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", file=sys.stderr, flush=True)

    env = dict(os.environ, RTMM_BENCH_THREADS=str(threads), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    results: list[AgainstResult] = []
    with checkout(commit, repo) as tree:
        progress(f"old: {rev} ({commit[:12]}) in {tree}; new: {package_root or ROOT}")
        old = _Worker("old", tree, env)
        new = _Worker("new", package_root or ROOT, env)
        try:
            for name in names:
                spec = (name, hidden, int(quick), dtype, device)
                results.append(
                    measure(
                        old, new, spec, rounds=rounds, burst_s=burst_s, progress=progress, cold=cold
                    )
                )
        finally:
            old.close()
            new.close()
    return results, table(results, rev)
