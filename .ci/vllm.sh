#!/usr/bin/env bash
# vLLM's own ModelRunner V2 classes as conformance targets, in each tested vLLM release.
#
# For each release: install it CPU-only into .ci/vllm-venv with the project's installer
# (tools/install_vllm_cpu.sh; a second release swaps vLLM only), run the adapter's tests,
# then the suite at its defaults against vLLM's classes by name
# (--conformance=vllm:MODULE:CLASS) with their known-gaps files and --conformance-strict:
# a failure a file does not list fails, and so does an entry whose checks pass again. For
# the release of the committed Engines reports, each run's report must reach the same
# verdicts as the committed one (examples/engine_reports/compare.py); regenerate them with
# examples/engine_reports/refresh.py when it does not.
#
#   bash .ci/vllm.sh                                # every tested release
#   RTMM_VLLM_VERSIONS=0.33.0 bash .ci/vllm.sh      # some of them
#
# Reports: .ci/vllm-VERSION-LEVEL.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1

VENV=.ci/vllm-venv
VERSIONS=${RTMM_VLLM_VERSIONS:-0.33.0 0.28.0}
REPORTED=0.33.0  # the release of examples/engine_reports/reports/vllm-*.json
PY="$VENV/bin/python"

step() { printf '\n==> %s\n' "$*"; }
timed() { local start=$SECONDS; "$@"; echo "    ($(( SECONDS - start )) s)"; }

# suite VERSION LEVEL SPEC: the suite against SPEC, strict, with the level's known gaps.
suite() {
  local version=$1 level=$2 spec=$3
  local gaps="examples/vllm_${level//-/_}/known-gaps-vllm-$version.txt"
  local report=".ci/vllm-$version-$level.json"
  step "conformance suite against vLLM $version: --conformance=vllm:$spec (strict, $gaps)"
  timed "$PY" -m pytest "--conformance=vllm:$spec" "--conformance-xfail=$gaps" \
    --conformance-strict "--conformance-report=$report" -p no:cacheprovider -q -rfE
  if [ "$version" = "$REPORTED" ]; then
    "$PY" examples/engine_reports/compare.py "examples/engine_reports/reports/vllm-$level.json" \
      "$report"
  fi
}

installed_project=0
for version in $VERSIONS; do
  step "vLLM $version (CPU-only) in $VENV"
  timed bash tools/install_vllm_cpu.sh "$VENV" --vllm "$version"
  if [ "$installed_project" = 0 ]; then
    timed "$PY" -m pip install --disable-pip-version-check -q -e ".[conformance]"
    installed_project=1
  fi
  "$PY" -c "import vllm, torch, rtmm_protocol; print('vllm', vllm.__version__, '| torch', torch.__version__, '| rtmm-protocol', rtmm_protocol.__version__)"

  step "the vLLM adapter's tests against vLLM $version"
  timed "$PY" -m pytest tests/test_vllm_adapter.py tests/suite/test_engine_examples.py \
    -p no:cacheprovider -q

  suite "$version" model-state vllm.v1.worker.gpu.model_states.default:DefaultModelState
  suite "$version" encoder-runner vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner
done

echo
echo "vLLM $VERSIONS: only the known gaps failed, none went stale; the Engines reports are current"
