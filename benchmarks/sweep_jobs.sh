#!/usr/bin/env bash
# Aggregate training throughput of `launch/sweep.py --jobs=1` (each run on every core, one after another) vs
# `--jobs=2` (two runs at once, each pinned to its half of the cores) on this machine: the same four short runs of
# the CIFAR-10 8×8-grid sweep's model (`configs/sweeps/cifar10_grid8.py:seeds=2`, arms full and gap, 2 seeds), each
# ending with its evaluation; the sweep's own `[sweep] aggregate: …` line (images trained ÷ the sweep's wall time,
# start-up, compile and evaluation included) per setting, appended to OUT/aggregate.txt with the CPU model.
#
#   bash benchmarks/sweep_jobs.sh [OUT] [STEPS]      # defaults: /tmp/sweep_jobs, 300 steps a run (≈ 5–10 min in all)
#
# Needs CIFAR-10 in data/cifar10 (`python -m vit_jax_struct.data.prepare --cifar=…/cifar-10-python.tar.gz
# --out=data/cifar10`) and an otherwise idle machine: other work on the cores skews both numbers.
set -euo pipefail
out=${1:-/tmp/sweep_jobs}
steps=${2:-300}
python=${PYTHON:-python}
if ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: STEPS '$steps' is not a positive whole number of train steps a run (e.g. 300)" >&2; exit 2
fi
if [ ! -d "$(dirname "$0")/../data/cifar10" ]; then
  echo "error: data/cifar10 does not exist: python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
mkdir -p "$out"
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $cpu, $(nproc) cores; $steps steps a run" \
  | tee -a "$out/aggregate.txt"
for jobs in 1 2; do
  rm -rf "$out/jobs$jobs"
  "$python" launch/sweep.py --sweep=configs/sweeps/cifar10_grid8.py:seeds=2 --root="$out/jobs$jobs" --run \
    --jobs="$jobs" --only=full --only=gap --set=total_steps="$steps" --set=eval_every_steps="$steps" \
    --set=checkpoint_every_steps="$steps" --set=fewshot.every_steps=0 > "$out/jobs$jobs.log" 2>&1
  grep "^\[sweep\] aggregate" "$out/jobs$jobs.log" | tee -a "$out/aggregate.txt"
done
