#!/usr/bin/env bash
# The GPU checks of issue 17, in one call on a lent GPU machine (at most 5 minutes; each
# step has its own timeout, so a hang costs only its share):
# the gpu-marked tests, then park/unpark and staged suspend timings against the limits measured
# in the same run. Usage: bash benchmarks/gpu_check.sh [GiB, default 40]; results land in $OUT.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
GIB=${1:-40}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/kernel_hooks/test_gpu.py tests/placement/test_gpu_park.py \
    tests/placement/test_gpu_release.py tests/replay/test_replay_live.py 2>&1 | tail -25 | tee "$OUT/gpu-tests.txt"
timeout 80 python benchmarks/bench_park.py --gib "$GIB" --runs 3 2>&1 | tee "$OUT/bench-park.txt"
# staged against direct through a real server: 5 GB, two runs each, to stay within one call
timeout 90 python benchmarks/bench_suspend.py --device cuda --gb 5 --runs 2 \
    --host-memory-limit 60% 2>&1 | tail -12 | tee "$OUT/bench-suspend.txt"
