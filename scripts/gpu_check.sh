#!/usr/bin/env bash
# The GPU check in one go (at most 5 minutes), from the repository root's .venv:
#   bash scripts/gpu_check.sh                  # on a machine with one or several GPUs
#   bash scripts/gpu_check.sh --dry-run        # the same checks on the CPU (no GPU needed)
#   OUT=report.json bash scripts/gpu_check.sh  # where the JSON report goes
# Any other option goes to `python -m pipemare_lite gpu-check` (see its --help). What it
# runs and what the report holds: pipemare_lite/cli/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
OUT="${OUT:-gpu_check_report.json}"
echo "== environment"
"$PY" -c "import torch; print('torch', torch.__version__, '| CUDA build', torch.version.cuda, '| GPUs', torch.cuda.device_count() if torch.cuda.is_available() else 0)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || true
fi
echo "== checks"
exec timeout 300 "$PY" -m pipemare_lite gpu-check --out "$OUT" "$@"
