#!/usr/bin/env bash
# Jelassi et al.'s CIFAR setting on one GPU: train-step throughput and MFU in bf16, then as many full CIFAR-10 runs
# (standard vs positional attention, 3 seeds each) as fit in a time budget. Everything lands in one folder.
#
#   bash benchmarks/gpu_paper_scale.sh OUT [--smoke]
#
# OUT receives at most 8 files: env.txt (GPU, jax), train_step.jsonl + train_step.txt (benchmarks/train_step.py
# --peak=h200, bf16: configs/jelassi_cifar.py at batch 128 and 1024, ViT-B/16 at 256, ViT-L/16 at 128), runs.jsonl
# and runs.md (benchmarks/paper_scale_summary.py: per run the steps reached, epochs, img/s, eval accuracy, wall
# time, whether it finished), log.txt (every command's output). The runs' workdirs are under $RUNS
# (default /tmp/paper_scale_runs): rerunning the script resumes them from their checkpoints.
#
# Environment: DATA = a CIFAR-10 image folder, or the .tar.gz of one (extracted to /tmp/data/cifar10);
# default .devdata/cifar10-jpeg.tar.gz. BUDGET_S = seconds for the training part (default 420): all runs start
# at once, one process each, on the one GPU; at the budget the ones still training get SIGTERM, checkpoint the next
# step and stop (exit 143). EPOCHS (default 300), SEEDS (default 3), PYTHON (default python3); QUICK=1 benchmarks
# the jelassi model at batch 128 only (a first check of a lease).
# --smoke: the same steps at toy size on any machine (CPU): tiny benchmark batches, the runs on the digits
# (jelassi_cifar.py:runlocal), 1 seed, no data needed. Tested by tests/test_benchmarks.py (the --smoke run).
set -uo pipefail
cd "$(dirname "$0")/.."
SCRIPT=benchmarks/gpu_paper_scale.sh
source benchmarks/gpu_common.sh "$@"
BUDGET_S=${BUDGET_S:-420}
EPOCHS=${EPOCHS:-300}
SEEDS=${SEEDS:-3}
RUNS=${RUNS:-/tmp/paper_scale_runs}
DATA=${DATA:-.devdata/cifar10-jpeg.tar.gz}
mkdir -p "$RUNS"

# 1. Train-step throughput and MFU (bf16, synthetic data on the device).
BF16="--config.model.dtype=bfloat16"
if [[ -z "$SMOKE" ]]; then
  PEAK="--peak=h200"; STEPS="--steps=30 --warmup=5 --rounds=3"
  BENCH=("--config=configs/jelassi_cifar.py --batch=128"
         "--config=configs/jelassi_cifar.py --batch=1024"
         "--config=configs/vit_b16.py --batch=256"
         "--config=configs/vit_l16.py --batch=128")
  [[ -n "${QUICK:-}" ]] && BENCH=("${BENCH[0]}")
else
  PEAK="--peak=cpu"; STEPS="--steps=1 --warmup=1 --rounds=1"
  BENCH=("--config=configs/jelassi_cifar.py --batch=4 --config.model.depth=1"
         "--config=configs/vit_b16.py --batch=2 --config.model.depth=1 --config.data.image_size=32")
fi
for args in "${BENCH[@]}"; do
  say "train_step $args"
  # shellcheck disable=SC2086
  $PY benchmarks/train_step.py $args $BF16 $PEAK $STEPS --out="$OUT/train_step.jsonl" >> "$OUT/train_step.txt" 2>&1 \
    || say "  failed (rc $?): see train_step.txt"
done
grep -E "img/s|MFU|peak|TFLOP" "$OUT/train_step.txt" | tail -n 20 | tee -a "$LOG"

# 2. Full runs: standard vs positional attention, SEEDS seeds each, all at once.
if [[ -z "$SMOKE" ]]; then
  if [[ "$DATA" == *.tar.gz ]]; then
    mkdir -p /tmp/data/cifar10 && tar xzf "$DATA" -C /tmp/data/cifar10 && DATA=/tmp/data/cifar10
  fi
  ARG="dataset=cifar10,epochs=$EPOCHS,root=$DATA"
  EXTRA="$BF16"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
else
  ARG="runlocal"; SEEDS=1
  EXTRA="--config.total_steps=4 --config.tensorboard=False"
fi
pids=()
for seed in $(seq 0 $((SEEDS - 1))); do
  for attention in standard positional; do
    name="${attention},seed=${seed}"
    say "start $name"
    # shellcheck disable=SC2086
    $PY main.py --config="configs/jelassi_cifar.py:$ARG" --workdir="$RUNS/$name" --config.seed="$seed" \
      --config.model.attention="$attention" $EXTRA > "$RUNS/$name.console.txt" 2>&1 &
    pids+=($!)
  done
done
deadline=$((SECONDS + BUDGET_S))
while (( SECONDS < deadline )); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  (( alive )) || break
  sleep 5
done
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && say "budget of ${BUDGET_S} s reached: SIGTERM to $p"; done
for p in "${pids[@]}"; do wait "$p"; say "process $p exited with $?"; done
$PY benchmarks/paper_scale_summary.py "$RUNS" --out="$OUT" 2>&1 | tee -a "$LOG"
