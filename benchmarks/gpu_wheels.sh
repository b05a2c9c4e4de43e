#!/usr/bin/env bash
# On a connected machine: the wheels a CUDA machine's image lacks for the GPU check, into wheelhouse/ (~20 MB;
# it travels with the source and benchmarks/gpu_check.sh installs it). The versions are constraints.txt's,
# so the GPU runs the libraries the CPU results were made with (torch excepted: the machine's CUDA build).
# Left out on purpose: what such images carry already (numpy, pandas, scipy, matplotlib, accelerate,
# safetensors, huggingface-hub, pyyaml, rich, tqdm, markdown-it-py, absl-py, pytest).
#   bash benchmarks/gpu_wheels.sh [PYTHON_VERSION]      # default 3.12, the version of the GPU image's python3
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
target=${1:-3.12}
pin() { grep -i "^$1==" constraints.txt; }
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
mkdir -p wheelhouse
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$target" --implementation cp $platforms \
  -d wheelhouse "$(pin transformers)" "$(pin tokenizers)" "$(pin peft)" "$(pin nltk)" "$(pin bert-score)" \
  "$(pin regex)" "$(pin defusedxml)"
"$python" -m pip wheel -q --no-deps -w wheelhouse "$(pin rouge_score)"  # published as a source archive only
ls wheelhouse
