#!/usr/bin/env bash
# The GPU check in one command (issue #55), for a bare CUDA machine holding persalign's source and, in
# wheelhouse/, the wheels of what such a machine lacks (fetch them on a connected machine: make gpu-wheels).
# Installs those wheels into a private folder (nothing of the machine's own install changes), then runs
# benchmarks/gpu_check.py with the arguments given; its first failing step stops it with one line.
#
#   bash benchmarks/gpu_check.sh --out gpu-check          # on the GPU machine: ~7 minutes on an H200 (measured)
#   bash benchmarks/gpu_check.sh --cpu-dry-run --out /tmp/gpu-check
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
wheels=${WHEELHOUSE:-wheelhouse}  # made for the GPU image's Python (3.12): point it elsewhere to skip them
if compgen -G "$wheels/*.whl" > /dev/null; then
  site=${PERSALIGN_GPU_SITE:-/tmp/persalign-gpu-site}
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$python" benchmarks/gpu_check.py "$@"
