#!/usr/bin/env bash
# The trained-model setting of both sweeps on one GPU: configs/sweeps/cifar10_grid8.py:regime (R2, R5-R8, J1) and
# configs/sweeps/cifar100_permuted.py:regime (J1-J4, R1, R3-R5, R8), many runs at once on the one accelerator.
#
#   bash benchmarks/gpu_regime.sh OUT [--smoke]
#
# Order: both sweeps side by side (two launch/sweep.py processes, JOBS runs each, each run its share of the GPU's
# memory: --gpu_memory=0.45 per sweep). Each sweep goes seed-major (every arm's seed 0, then seed 1, ...), so a
# cut-off leaves complete seeds; the CIFAR-100 sweep runs its ViT arms (vit_) before its CNN arms. At BUDGET_S the
# runs still training get SIGTERM, checkpoint and stop (exit 143): rerunning the script resumes them.
#
# OUT receives: env.txt (GPU, jax), log.txt (every command's output, the sweeps' [sweep] lines with their aggregate
# img/s), runs_<sweep>.jsonl + runs_<sweep>.md (benchmarks/paper_scale_summary.py: per run steps, epochs, img/s, eval
# accuracy, wall time, finished), report/ (python -m vit_jax_struct.experiments.report over both roots: scoreboard.md, runs.csv,
# verdicts.json) and runs/ (the runs' small files, no checkpoints: what docs/results/runs/ archives). The runs'
# workdirs are under $RUNS (default /tmp/regime_runs)/<sweep>.
#
# Environment: DATA10 / DATA100 = a CIFAR-10 / CIFAR-100 image folder (root/{train,test}/<class>/*) or the .tar.gz of
# one (extracted under /tmp/data); defaults data/cifar10 and data/cifar100 (python -m vit_jax_struct.data.prepare
# --cifar=…). JOBS (default 8 per sweep), BUDGET_S (default 480: the training part; the whole script stays within
# 9 minutes on one H200 only if the runs fit it -- not yet measured on one), PYTHON (default python3).
# --smoke: the same steps at toy size on any machine (CPU, no data needed): tiny synthetic image folders, 1 seed,
# two arms of each sweep, a few steps each. Tested by tests/test_benchmarks.py.
set -uo pipefail
cd "$(dirname "$0")/.."
SCRIPT=benchmarks/gpu_regime.sh
source benchmarks/gpu_common.sh "$@"
BUDGET_S=${BUDGET_S:-480}
JOBS=${JOBS:-8}
RUNS=${RUNS:-/tmp/regime_runs}
DATA10=${DATA10:-data/cifar10}
DATA100=${DATA100:-data/cifar100}
mkdir -p "$RUNS"

folder() {  # a folder, or a .tar.gz extracted to /tmp/data/<name>: prints the folder
  local src=$1 name=$2
  if [[ "$src" == *.tar.gz ]]; then
    mkdir -p "/tmp/data/$name" && tar xzf "$src" -C "/tmp/data/$name" && src="/tmp/data/$name"
  fi
  echo "$src"
}

if [[ -z "$SMOKE" ]]; then
  DATA10=$(folder "$DATA10" cifar10); DATA100=$(folder "$DATA100" cifar100)
  ARG10="regime,root=$DATA10"; ARG100="regime,root=$DATA100"
  ONLY10=(); ONLY100=(--only=vit_ --only=cnn_)  # the ViT arms first, then the CNNs (sweep order within each)
  SETS10=(); SETS100=()
  GPUS=-1
else
  # Synthetic CIFAR-shaped folders (random 32-px PNGs): 10 classes and 100 classes.
  DATA10="$RUNS/data/cifar10"; DATA100="$RUNS/data/cifar100"
  $PY - "$DATA10" 10 60 "$DATA100" 100 2 <<'EOF' || { say "could not write the synthetic folders"; exit 1; }
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(0)
a = sys.argv[1:]
for root, n, per in zip(a[0::3], map(int, a[1::3]), map(int, a[2::3])):
    for split, k in (("train", per), ("test", max(per // 4, 1))):
        for c in range(n):
            d = os.path.join(root, split, f"class{c:03d}")
            os.makedirs(d, exist_ok=True)
            for i in range(k):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(os.path.join(d, f"{i}.png"))
EOF
  ARG10="regime,seeds=1,steps=4,width=16,depth=1,heads=2,mlp=32,root=$DATA10"
  ARG100="regime,seeds=1,steps=4,cnn_steps=2,cnn_width=4,root=$DATA100"
  ONLY10=(--only=full --only=positional); ONLY100=(--only=vit_original --only=cnn_resnet18w4_original)
  SETS100=(--set=batch_size=8 --set=eval_batch_size=16 --set=tensorboard=False)
  SETS10=("${SETS100[@]}" --set=fewshot.train_examples=600 --set=fewshot.holdout_examples=100
          --set=fewshot.test_examples=100)
  JOBS=1; GPUS=0
fi

# Both sweeps at once, each in its own process group so that the budget's SIGTERM reaches every run.
setsid $PY launch/sweep.py --sweep="configs/sweeps/cifar10_grid8.py:$ARG10" --root="$RUNS/cifar10_grid8" --run \
  --jobs="$JOBS" --gpus="$GPUS" --gpu_memory=0.45 --no-pin "${ONLY10[@]}" "${SETS10[@]}" >> "$LOG" 2>&1 &
p10=$!
setsid bash -c "for only in ${ONLY100[*]}; do $PY launch/sweep.py --sweep='configs/sweeps/cifar100_permuted.py:$ARG100' \
  --root='$RUNS/cifar100_permuted' --run --jobs=$JOBS --gpus=$GPUS --gpu_memory=0.45 --no-pin \$only ${SETS100[*]}; done" \
  >> "$LOG" 2>&1 &
p100=$!
say "started: cifar10_grid8 (pid $p10), cifar100_permuted (pid $p100), $JOBS runs at a time each, budget ${BUDGET_S} s"
deadline=$((SECONDS + BUDGET_S))
while (( SECONDS < deadline )) && { kill -0 "$p10" 2>/dev/null || kill -0 "$p100" 2>/dev/null; }; do
  sleep 2
done
for p in "$p10" "$p100"; do
  if kill -0 "$p" 2>/dev/null; then
    say "budget of ${BUDGET_S} s reached: SIGTERM to the runs of process group $p"
    kill -TERM -- -"$p" 2>/dev/null
  fi
done
wait "$p10"; rc10=$?
wait "$p100"; rc100=$?
say "cifar10_grid8 sweep exited $rc10, cifar100_permuted sweep exited $rc100"
grep -h "^\[sweep\] aggregate" "$LOG" | tee -a "$OUT/aggregate.txt" > /dev/null

for sweep in cifar10_grid8 cifar100_permuted; do
  $PY benchmarks/paper_scale_summary.py "$RUNS/$sweep" --out="$OUT" --prefix="runs_${sweep}" 2>&1 | tee -a "$LOG"
done
$PY -m vit_jax_struct.experiments.report --runs="$RUNS/cifar10_grid8" --runs="$RUNS/cifar100_permuted" --out="$OUT/report" \
  --archive="$OUT/runs" --no-curves >> "$LOG" 2>&1 || say "report failed (rc $?): see log.txt"
say "done: $(ls "$OUT" | tr '\n' ' ')"
