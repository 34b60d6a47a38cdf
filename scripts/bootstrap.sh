#!/usr/bin/env bash
# Create or reuse .venv and install pipemare-lite with the book and test extras. Safe to
# re-run. (The engine alone: `pip install -e .`, torch and numpy its only big dependencies.)
#
# torch: a torch already importable in .venv is kept. Otherwise we ask for TORCH_SPEC
# (default torch==2.13.0, the CPU build this project is tested with) *before* installing the
# package, so that pip never resolves a bare "torch" to a multi-GB CUDA build by accident.
# GPU users: TORCH_SPEC="torch==2.13.0" TORCH_INDEX=https://download.pytorch.org/whl/cu128 \
#            bash scripts/bootstrap.sh   (or install torch into .venv yourself first).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.pipemare-installed"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  spec=${TORCH_SPEC:-torch==2.13.0}
  echo "[bootstrap] installing $spec"
  if [ -n "${TORCH_INDEX:-}" ]; then
    "$VPY" -m pip install --quiet "$spec" --index-url "$TORCH_INDEX"
  else
    "$VPY" -m pip install --quiet "$spec"
  fi
fi

# Reinstall only when pyproject.toml changed since the last successful install.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # [classroom] too: the nbgrader/otter round trips are part of `make test`, not skipped
  echo "[bootstrap] installing pipemare-lite[book,test,classroom] (editable)"
  "$VPY" -m pip install --quiet -e ".[book,test,classroom]"
  # The kernel "python3" inside .venv (not --user: that would repoint every other Jupyter of
  # this user to this checkout). `make test` and `make book` start .venv's Python directly.
  "$VPY" -m ipykernel install --sys-prefix --name python3 >/dev/null 2>&1 || true
  touch "$stamp"
fi
echo "[bootstrap] torch $("$VPY" -c 'import torch; print(torch.__version__)') in $VENV"
# Grading untrusted submissions needs bubblewrap (a jail per submission). The bootstrap does
# not apt-get (it does not run as root); .ci/run installs it on CI.
if ! command -v bwrap >/dev/null 2>&1; then
  echo "[bootstrap] NOTE: 'bwrap' (bubblewrap) is not installed: 'pipemare_lite grade' and" >&2
  echo "[bootstrap]       'make grade' will refuse to grade students' work until you run" >&2
  echo "[bootstrap]       'sudo apt-get install bubblewrap' (see docs/instructors.md)." >&2
fi
