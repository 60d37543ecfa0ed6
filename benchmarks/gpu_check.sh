#!/usr/bin/env bash
# The GPU checks of issue 17, in one call on a lent GPU machine (about 4 minutes on an H200):
# the gpu-marked tests, then park/unpark and staged suspend timings against the limits measured
# in the same run. Usage: bash benchmarks/gpu_check.sh [GiB, default 40]; results land in $OUT.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
GIB=${1:-40}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py tests/test_gpu_park.py \
    tests/test_gpu_release.py 2>&1 | tail -25 | tee "$OUT/gpu-tests.txt"
timeout 120 python benchmarks/bench_park.py --gib "$GIB" --runs 3 2>&1 | tee "$OUT/bench-park.txt"
timeout 200 python benchmarks/bench_suspend.py --device cuda --gb "$(( GIB / 2 ))" --runs 3 \
    --host-memory-limit 60% 2>&1 | tail -12 | tee "$OUT/bench-suspend.txt"
