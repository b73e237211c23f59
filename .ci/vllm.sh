#!/usr/bin/env bash
# vLLM 0.33.0's own code as conformance targets: install vLLM CPU-only into .ci/vllm-venv,
# install this project into it, and run the suite against both vLLM examples with their
# known-gaps files. Fails on any failure the known-gaps files do not list; an entry whose
# checks pass again (vLLM fixed it) is reported as stale in the run's table and JSON.
# Reports: .ci/vllm-encoder-runner.json, .ci/vllm-model-state.json.
#
#   bash .ci/vllm.sh            # from anywhere; about a minute to install, a minute to run
#
# Env: RTMM_SHARED_DIR (default ../shared relative to the repository root) holds
# tools/install_vllm_cpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1

VENV=.ci/vllm-venv
SHARED_DIR="${RTMM_SHARED_DIR:-../shared}"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)

step() { printf '\n==> %s\n' "$*"; }
timed() { local start=$SECONDS; "$@"; echo "    ($(( SECONDS - start )) s)"; }

INSTALLER="$SHARED_DIR/tools/install_vllm_cpu.sh"
if [ ! -f "$INSTALLER" ]; then
  echo "vllm.sh: no vLLM installer at $INSTALLER (set RTMM_SHARED_DIR to the folder holding tools/)" >&2
  exit 1
fi

step "vLLM 0.33.0 (CPU-only) in $VENV"
timed bash "$INSTALLER" "$VENV"
timed "${PIP[@]}" -e . --no-deps
timed "${PIP[@]}" "typing_extensions>=4.12" "pytest>=8,<10" "hypothesis>=6.100,<7" \
  "pytest-xdist>=3.5,<4"
"$VENV/bin/python" -c "import vllm, torch, rtmm_protocol; print('vllm', vllm.__version__, '| torch', torch.__version__, '| rtmm-protocol', rtmm_protocol.__version__)"

# run_example NAME MODULE:FACTORY PYTHONPATH
run_example() {
  local name=$1 factory=$2 path=$3
  step "conformance suite against vLLM: $name"
  PYTHONPATH="$path" timed "$VENV/bin/python" -m pytest \
    "--conformance=$factory" \
    "--conformance-xfail=examples/${name//-/_}/known-gaps.txt" \
    "--conformance-report=.ci/${name}.json" \
    -p no:cacheprovider -q -rfE -W ignore::DeprecationWarning
}

run_example vllm-encoder-runner vllm_encoder_runner.factory:make_encoder_runner \
  examples/vllm_encoder_runner
run_example vllm-model-state vllm_model_state.factory:make_model_state \
  examples/vllm_encoder_runner:examples/vllm_model_state

echo
echo "vLLM examples passed (only known gaps failed)"
