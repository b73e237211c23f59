#!/usr/bin/env bash
# End to end, the way users get the suite: build the wheel, install it (not editable)
# in a fresh virtual environment without the system's site packages, and run
# `pytest --conformance=MODULE:FACTORY` from a project folder outside this repository
# against the separately installed example package. The project folder has its own
# `conformance/` package and a `python_files` setting that matches none of the suite's
# files; neither may hide or shadow the suite. On the way it checks the wheel's layout
# (the two top-level packages rtmm_protocol and rtmm_conformance, each typed) and that
# the suite's former import path and matrix command fail, naming the new ones.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rtmm-wheel-e2e.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say() { printf -- '--- %s\n' "$*"; }
fail() { printf 'wheel e2e FAILED: %s\n' "$*" >&2; exit 1; }

say "build the wheel"
"$PYTHON" -m pip wheel --no-deps --quiet --wheel-dir "$WORK/dist" "$REPO"
WHEEL="$(ls "$WORK"/dist/rtmm_protocol-*.whl)"
"$PYTHON" - "$WHEEL" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
needed = [
    "rtmm_protocol/__init__.py",
    "rtmm_protocol/py.typed",
    "rtmm_conformance/__init__.py",
    "rtmm_conformance/__main__.py",
    "rtmm_conformance/py.typed",
    "rtmm_conformance/plugin.py",
    "rtmm_conformance/catalog.py",
    "rtmm_conformance/checks/gather.py",
]
missing = [n for n in needed if n not in names]
if missing:
    sys.exit(f"the wheel lacks {missing}")
# Two ordinary top-level packages: the contract and the reference (rtmm_protocol) and
# the suite (rtmm_conformance, from conformance/rtmm_conformance/). The suite's source
# root itself (conformance/) may not land at the top level, where it would clash with a
# user's own `conformance` package, nor the suite under its former path.
top = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
if top != {"rtmm_protocol", "rtmm_conformance"}:
    sys.exit(f"the wheel's top-level entries are {sorted(top)}, "
             "not rtmm_protocol and rtmm_conformance")
old = sorted(n for n in names if n.startswith("rtmm_protocol/conformance/"))
if old:
    sys.exit(f"the wheel still has the suite's former folder rtmm_protocol/conformance/: {old[:5]}")
entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
if not entry_points:
    sys.exit("the wheel has no entry_points.txt (the pytest11 plugin would not load)")
declared = zipfile.ZipFile(sys.argv[1]).read(entry_points[0]).decode()
if "rtmm_conformance = rtmm_conformance.plugin" not in declared:
    sys.exit(f"the pytest11 entry point is not rtmm_conformance.plugin:\n{declared}")
print(f"wheel {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, suite included")
PY

say "fresh virtual environment (no system site packages)"
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
VPYTEST="$WORK/venv/bin/pytest"
# The pinned CPU build installs from local disk; an unpinned torch would pull a CUDA build.
"$VPY" -m pip install --quiet torch==2.13.0
"$VPY" -m pip install --quiet "$WHEEL" pytest hypothesis pytest-xdist
"$VPY" -m pip install --quiet "$REPO/examples/acme_model_state"

say "a user project outside the repository"
PROJECT="$WORK/project"
mkdir -p "$PROJECT/conformance" "$PROJECT/tests"
printf '"""The project'"'"'s own conformance package."""\nSHADOW = True\n' > "$PROJECT/conformance/__init__.py"
printf '[pytest]\npython_files = check_*.py\n' > "$PROJECT/pytest.ini"
printf 'def test_plain():\n    assert True\n' > "$PROJECT/check_plain.py"
# A factory module that lives only in the project folder (not installed): importable
# because the plugin adds the invocation directory.
cat > "$PROJECT/local_factory.py" <<'PY'
from acme_model_state import make_state as make_local_state
PY
cd "$PROJECT"

"$VPY" - "$REPO" <<'PY'
import sys
import acme_model_state
import rtmm_conformance.plugin as plugin

repo = sys.argv[1]
for module in (plugin, acme_model_state):
    if module.__file__.startswith(repo) or "site-packages" not in module.__file__:
        sys.exit(f"{module.__name__} comes from {module.__file__}, not the installed wheel")
print("suite and example imported from site-packages")

# The suite's former import path fails, and says where the suite went.
try:
    import rtmm_protocol.conformance  # noqa: F401
except ModuleNotFoundError as error:
    if "rtmm_conformance" not in str(error):
        sys.exit(f"import rtmm_protocol.conformance does not name rtmm_conformance: {error}")
    print("import rtmm_protocol.conformance fails, naming rtmm_conformance")
else:
    sys.exit("import rtmm_protocol.conformance succeeded: the former path must fail")
PY

say "pytest --conformance=acme_model_state.factory:make_state -n 2"
"$VPYTEST" -p no:cacheprovider -n 2 --conformance=acme_model_state.factory:make_state \
    --conformance-report=report.json --junitxml=junit.xml | tee run.txt
grep -q "^rtmm-protocol conformance suite" run.txt || fail "no conformance header"
grep -Eq "^contract: [0-9]+ passed, 0 failed \(MUST\)" run.txt || fail "no clean summary line"
"$VPY" - <<'PY'
import json
import xml.etree.ElementTree as ET

report = json.load(open("report.json"))
assert report["summary"]["ok"], report["summary"]
assert report["kind"] == "model_state", report["kind"]
assert report["summary"]["passed"] >= 38, report["summary"]
props = {
    (p.get("name"), p.get("value"))
    for p in ET.parse("junit.xml").iter("property")
}
assert ("clause", "G5") in props and ("level", "MUST") in props, sorted(props)[:10]
print(f"JSON report: {report['summary']['line']}; junit properties carry clause and level")
PY

say "the compliance matrix: python -m rtmm_conformance matrix"
"$VPY" -m rtmm_conformance matrix acme=report.json > matrix.md
grep -q "G5" matrix.md || fail "the matrix does not list the checks"
set +e
"$VPY" -m rtmm_protocol matrix report.json > old-matrix.txt 2>&1
status=$?
set -e
[ "$status" -eq 2 ] || fail "python -m rtmm_protocol matrix: expected status 2, got $status"
grep -q "python -m rtmm_conformance matrix" old-matrix.txt \
    || fail "python -m rtmm_protocol matrix does not name the new command"

say "rerun one check by its printed node ID"
"$VPYTEST" -p no:cacheprovider -q --conformance=acme_model_state.factory:make_state \
    "rtmm-conformance::G5-rows-match-mask[realtime]" | tee rerun.txt
grep -Eq "^1 passed" rerun.txt || fail "the node ID did not select exactly one check"

say "a factory module in the invocation directory"
"$VPYTEST" -p no:cacheprovider -q --conformance=local_factory:make_local_state -k "T1" \
    | tee local.txt
grep -Eq "^contract: [0-9]+ passed, 0 failed" local.txt || fail "local factory not importable"

say "usage error for 'pytest --conformance tests/'"
set +e
"$VPYTEST" -p no:cacheprovider --conformance tests/ > usage.txt 2>&1
status=$?
set -e
cat usage.txt
[ "$status" -eq 4 ] || fail "expected pytest's usage-error status 4, got $status"
grep -q "MODULE:FACTORY" usage.txt || fail "the usage error does not explain MODULE:FACTORY"

say "without --conformance the plugin stays out of the way"
"$VPYTEST" -p no:cacheprovider -q | tee plain.txt
grep -Eq "^1 passed" plain.txt || fail "the project's own test did not run alone"
if grep -q "rtmm-protocol conformance" plain.txt; then fail "the plugin acted without --conformance"; fi

say "the example's own test file (parametrize_with_checks)"
"$VPYTEST" -p no:cacheprovider -q -n 2 "$REPO/examples/acme_model_state/tests" \
    -c "$REPO/examples/acme_model_state/pyproject.toml" --rootdir "$REPO/examples/acme_model_state" | tail -n 2

echo "wheel e2e passed"
