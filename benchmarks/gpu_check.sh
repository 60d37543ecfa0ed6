#!/usr/bin/env bash
# The GPU checks, in one call on a lent GPU machine (at most 4.4 minutes; each step has its own
# timeout, so a hang costs only its share): every gpu-marked test (`pytest -m gpu`, so none is
# left out), then park/unpark and staged suspend timings against the limits measured in the same
# run. Usage: bash benchmarks/gpu_check.sh [GiB to park, default 8]; results land in $OUT.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
GIB=${1:-8}
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 180 python -m pytest -m gpu -q -p no:cacheprovider 2> -p no:cacheprovider -rs 2>&11 | tail -40 | tee "$OUT/gpu-tests.txt"
timeout 35 python benchmarks/bench_park.py --gib "$GIB" --runs 2 2>&1 | tee "$OUT/bench-park.txt"
# staged against direct through a real server: 1 GB, two runs each, to stay within one call
timeout 45 python benchmarks/bench_suspend.py --device cuda --gb 1 --runs 2 \
    --host-memory-limit 60% 2>&1 | tail -12 | tee "$OUT/bench-suspend.txt"
