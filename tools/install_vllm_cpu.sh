#!/usr/bin/env bash
# Install vLLM without a GPU: enough of it to build and run its ModelRunner V2 model states
# and encoder runner on a CPU, which is what the conformance suite's vLLM adapter needs.
#
#   bash tools/install_vllm_cpu.sh VENV [--vllm VERSION]    # default VERSION: 0.33.0
#
# Creates the virtual environment VENV if it does not exist, then installs into it:
#   1. torch 2.13.0, the CPU build (from PyTorch's CPU index, else from the sources pip is
#      configured with); a torch 2.13.0 already there is kept. Never an unpinned torch.
#   2. vLLM VERSION itself, without its dependencies (they pull CUDA builds of torch,
#      FlashInfer and more);
#   3. the packages vLLM's import needs, pinned in tools/vllm-cpu-requirements.txt (with
#      those the modules of vLLM's model states import, compressed-tensors for Kimi K3's);
#   4. torchvision 0.28.0's CPU build, from PyTorch's CPU index where it answers (PyPI has
#      none that imports beside the CPU torch): DiffusionGemma's and MiniMax-M3's states
#      import it.
# Then it checks that vLLM's model states import. Running it again with another VERSION
# swaps vLLM only. Install rtmm-protocol into VENV afterwards, for example
#   VENV/bin/pip install -e ".[conformance]"
#
# Supported: vLLM 0.28.0 to 0.33.x (the adapter's range); tested: 0.28.0 and 0.33.0.
# Measured on a shared 2-core machine: about 4 to 6.5 minutes into a new environment, 1.5
# minutes to swap releases (docs/engines.md has the details).
#
# Env: PYTHON (default python3) creates the environment; TORCH_INDEX_URL (default
# https://download.pytorch.org/whl/cpu) is where the CPU build of torch is looked for.
set -euo pipefail

usage() { echo "usage: $0 VENV [--vllm VERSION]" >&2; exit 2; }
[ $# -ge 1 ] || usage
VENV=$1
shift
VERSION=0.33.0
while [ $# -gt 0 ]; do
  case $1 in
    --vllm) [ $# -ge 2 ] || usage; VERSION=$2; shift 2 ;;
    *) usage ;;
  esac
done
case $VERSION in
  0.28.*|0.29.*|0.30.*|0.31.*|0.32.*|0.33.*) ;;
  *) echo "install_vllm_cpu: vLLM $VERSION is outside the supported 0.28.0 to 0.33.x" >&2; exit 2 ;;
esac

HERE=$(cd "$(dirname "$0")" && pwd)
REQUIREMENTS="$HERE/vllm-cpu-requirements.txt"
PYTHON=${PYTHON:-python3}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
say() { printf '[install_vllm_cpu] %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)

installed() {  # the installed version of a distribution, or nothing
  "$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1"
}

# 1. torch 2.13.0, CPU build: from PyTorch's CPU index where it answers, else from the
#    sources pip is configured with (a local wheel store, say).
reachable() {
  "$PY" -c "import sys, urllib.request
try: urllib.request.urlopen(sys.argv[1], timeout=15)
except Exception: sys.exit(1)" "$1" 2>/dev/null
}
TORCH=$(installed torch)
if [[ $TORCH == 2.13.0* ]]; then
  say "torch $TORCH already installed"
elif reachable "$TORCH_INDEX_URL/torch/"; then
  "${PIP[@]}" --index-url "$TORCH_INDEX_URL" torch==2.13.0
  say "torch $(installed torch) from $TORCH_INDEX_URL"
else
  say "$TORCH_INDEX_URL does not answer; torch 2.13.0 from pip's configured sources"
  "${PIP[@]}" torch==2.13.0
  say "torch $(installed torch)"
fi

# 2. vLLM itself, without its dependencies.
if [ "$(installed vllm)" = "$VERSION" ]; then
  say "vLLM $VERSION already installed"
else
  "${PIP[@]}" --no-deps "vllm==$VERSION"
  say "vLLM $VERSION installed (without its dependencies)"
fi

# 3. What vLLM's import needs, and what the modules of its model states import besides.
"${PIP[@]}" --no-deps -r "$REQUIREMENTS"

# 4. torchvision, which two of vLLM's model states import (DiffusionGemma's, MiniMax-M3's):
#    only PyTorch's CPU index has a CPU build that matches torch 2.13.0 (PyPI's is built
#    against the CUDA torch and does not import beside the CPU one).
if [ -n "$(installed torchvision)" ]; then
  say "torchvision $(installed torchvision) already installed"
elif reachable "$TORCH_INDEX_URL/torchvision/"; then
  "${PIP[@]}" --no-deps --index-url "$TORCH_INDEX_URL" torchvision==0.28.0
  say "torchvision $(installed torchvision) from $TORCH_INDEX_URL"
else
  say "note: $TORCH_INDEX_URL does not answer, so no torchvision: the model states of" \
    "DiffusionGemma and MiniMax-M3 will not import (the others do)"
fi
if [ "$("$PY" -c 'import torch; print(torch.version.cuda or "")')" != "" ]; then
  say "note: this torch is a CUDA build; it runs on a CPU too, but the CPU build is smaller"
fi

# The check: vLLM's ModelRunner V2 model states import, and vLLM's configs build.
if "$PY" - "$VERSION" <<'PY'
import sys
import warnings

warnings.simplefilter("ignore", DeprecationWarning)
import torch
import vllm
from vllm.config import DeviceConfig, SchedulerConfig, VllmConfig
from vllm.v1.worker.gpu.mm.encoder_runner import EncoderRunner  # noqa: F401
from vllm.v1.worker.gpu.model_states.default import DefaultModelState  # noqa: F401

assert vllm.__version__ == sys.argv[1], (vllm.__version__, sys.argv[1])
assert torch.__version__.startswith("2.13.0"), torch.__version__
VllmConfig(
    device_config=DeviceConfig(device=torch.device("cpu")),
    scheduler_config=SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64, is_encoder_decoder=False
    ),
)
PY
then
  say "OK: vLLM $VERSION (CPU) in $VENV, torch $(installed torch)"
else
  say "FAILED: vLLM $VERSION does not import in $VENV (see the error above)" >&2
  exit 1
fi
