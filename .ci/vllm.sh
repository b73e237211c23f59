#!/usr/bin/env bash
# vLLM's own ModelRunner V2 classes as conformance targets, in each tested vLLM release.
#
# For each release: install it CPU-only into .ci/vllm-venv with the project's installer
# (tools/install_vllm_cpu.sh; a second release swaps vLLM only), run the adapter's tests
# (the galleries of faults, vLLM's model states by name, the Engines page's console
# outputs), then the suite at its defaults against vLLM's DefaultModelState and
# EncoderRunner by name (--conformance=vllm:MODULE:CLASS) with their known-gaps files and
# --conformance-strict: a failure a file does not list fails, and so does an entry whose
# checks pass again. For the release of the committed Engines reports, each run's report
# must reach the same verdicts as the committed one (examples/engine_reports/compare.py),
# and so must a fresh run of every other model state vLLM ships (refresh.py --check);
# regenerate them with examples/engine_reports/refresh.py when they do not.
#
#   bash .ci/vllm.sh                                # every tested release
#   RTMM_VLLM_VERSIONS=0.33.0 bash .ci/vllm.sh      # some of them
#   bash .ci/vllm.sh --install-first                # only install the first one (and the
#                                                   # project): .ci/run starts this early
#
# Reports: .ci/vllm-VERSION-LEVEL.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1

VENV=.ci/vllm-venv
VERSIONS=${RTMM_VLLM_VERSIONS:-0.33.0 0.28.0}
REPORTED=0.33.0  # the release of examples/engine_reports/reports/vllm-*.json
PY="$VENV/bin/python"
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

step() { printf '\n==> %s\n' "$*"; }
timed() { local start=$SECONDS; "$@"; echo "    ($(( SECONDS - start )) s)"; }

# suite VERSION LEVEL SPEC: the suite against SPEC, strict, with the level's known gaps;
# its output goes to $LOGS/vllm-VERSION-LEVEL.log.
suite() {
  local version=$1 level=$2 spec=$3
  "$PY" -m pytest "--conformance=vllm:$spec" \
    "--conformance-xfail=examples/vllm_${level//-/_}/known-gaps-vllm-$version.txt" \
    --conformance-strict "--conformance-report=.ci/vllm-$version-$level.json" \
    -p no:cacheprovider -q -rfE >"$LOGS/vllm-$version-$level.log" 2>&1
}

# suites VERSION: both levels at once (each run is a process of its own and mostly waits on
# one core), then their logs; for the release of the committed reports, the comparison.
suites() {
  local version=$1 status=0 level
  step "conformance suite against vLLM $version by class name, both levels at once (strict, known gaps)"
  local start=$SECONDS
  suite "$version" model-state vllm.v1.worker.gpu.model_states.default:DefaultModelState &
  local model_state=$!
  suite "$version" encoder-runner vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner &
  local encoder_runner=$!
  wait "$model_state" || status=1
  wait "$encoder_runner" || status=1
  echo "    ($(( SECONDS - start )) s)"
  for level in model-state encoder-runner; do
    printf -- '--- vLLM %s, %s: the end of its output, without vLLM log lines\n' "$version" "$level"
    { grep -v -E '^(INFO|WARNING) [0-9-]+ |vllm\._C|Triton not' "$LOGS/vllm-$version-$level.log" || true; } |
      tail -n 25
  done
  [ "$status" = 0 ] || { echo "vllm.sh: a suite run failed against vLLM $version (logs above)" >&2; return 1; }
  if [ "$version" = "$REPORTED" ]; then
    for level in model-state encoder-runner; do
      "$PY" examples/engine_reports/compare.py "examples/engine_reports/reports/vllm-$level.json" \
        ".ci/vllm-$version-$level.json" || status=1
    done
  fi
  # Called as `suites V || ...`, where set -e is off: every failure is in the status.
  return "$status"
}

# pip lists every requirement of vLLM that the CPU-only install leaves out (a CUDA torch,
# FlashInfer...) after each install into the environment: expected, so not shown.
quiet_pip() {
  "$@" 2> >(grep -v -E "requires .*, which is not installed|which is incompatible|dependency resolver does not currently" >&2)
}

installed_project=0
for version in $VERSIONS; do
  step "vLLM $version (CPU-only) in $VENV"
  timed bash tools/install_vllm_cpu.sh "$VENV" --vllm "$version"
  if [ "$installed_project" = 0 ]; then
    timed quiet_pip "$PY" -m pip install --disable-pip-version-check -q -e ".[conformance,typecheck]"
    installed_project=1
  fi
  [ "${1:-}" != --install-first ] || exit 0
  "$PY" -c "import vllm, torch, rtmm_protocol; print('vllm', vllm.__version__, '| torch', torch.__version__, '| rtmm-protocol', rtmm_protocol.__version__)"

  # The adapter's tests, the galleries of subclasses with faults of their own (each
  # reported by its clause, as the class's own; vLLM's classes with no contract failure),
  # vLLM's model states and their typing, and the Engines page's console outputs (but
  # the known-gaps run's, which the suite run below is, and tests/test_engine_reports.py
  # derives from the committed report) run beside the two suite runs.
  start=$SECONDS
  "$PY" -m pytest tests/test_vllm_adapter.py tests/test_vllm_gallery.py tests/test_vllm_inputs_gallery.py \
    tests/test_vllm_in_tree.py tests/test_vllm_typing.py tests/suite/test_engine_examples.py \
    "tests/test_docs_numbers.py::test_shown_console_output_is_a_real_runs" \
    -k "not test_shown_console_output or (engines and not known-gaps)" \
    -p no:cacheprovider -q >"$LOGS/adapter-$version.log" 2>&1 &
  adapter=$!
  # For the release of the committed reports, vLLM's other model states by name, against
  # the Engines page's reports: beside the rest too (it mostly waits on one core).
  states=""
  if [ "$version" = "$REPORTED" ]; then
    "$PY" examples/engine_reports/refresh.py --check states/ >"$LOGS/states-$version.log" 2>&1 &
    states=$!
  fi
  suites_status=0
  suites "$version" || suites_status=$?
  adapter_status=0
  wait "$adapter" || adapter_status=$?
  step "the vLLM adapter's and gallery's tests against vLLM $version (run beside the suites: $(( SECONDS - start )) s for all)"
  tail -n 25 "$LOGS/adapter-$version.log"
  [ "$adapter_status" = 0 ] || { echo "vllm.sh: the adapter's tests failed against vLLM $version" >&2; exit 1; }
  if [ -n "$states" ]; then
    states_status=0
    wait "$states" || states_status=$?
    step "vLLM $version's other model states by name, against the Engines page's reports (beside the rest: $(( SECONDS - start )) s for all)"
    { grep -v -E '^(INFO|WARNING) [0-9-]+ |vllm\._C|Triton|^W[0-9]{4} |^\[transformers\]' "$LOGS/states-$version.log" || true; }
    [ "$states_status" = 0 ] || { echo "vllm.sh: a model state's report is stale against vLLM $version" >&2; exit 1; }
  fi
  [ "$suites_status" = 0 ] || exit 1
done

echo
echo "vLLM $VERSIONS: only the known gaps failed, none went stale; the Engines reports are current"
