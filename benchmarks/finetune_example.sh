#!/usr/bin/env bash
# The README's fine-tuning example: the CIFAR-100 ViT of configs/cifar10_vit.py (8-px patches, width 128, depth 6)
# pretrained for 2,000 steps on CIFAR-100, then fine-tuned on CIFAR-10 for 500 steps (head re-initialised:
# init_reinit), against the same model trained from scratch on CIFAR-10 for the same 500 steps; 3 seeds each (fixed
# before any run). ~ 20 min on 2 CPU cores.
#
#   bash benchmarks/finetune_example.sh [ROOT]        # ROOT default runs/finetune; data in data/cifar10, data/cifar100
#   bash benchmarks/finetune_example.sh --summary [ROOT]   # only the table, from the runs' final_metrics.json
#
# Data: python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10 (and
# cifar-100-python.tar.gz -> data/cifar100). Finished runs are skipped (a rerun resumes).
set -euo pipefail
cd "$(dirname "$0")/.."
SUMMARY_ONLY=0
if [ "${1:-}" = "--summary" ]; then SUMMARY_ONLY=1; shift; fi
ROOT=${1:-runs/finetune}
PY=${PYTHON:-.venv/bin/python}
run() {  # workdir, then flags; skipped when finished
  local wd=$1; shift
  [ -f "$wd/final_metrics.json" ] && { echo "$wd: done"; return 0; }
  echo "$wd: training"
  mkdir -p "$wd"
  "$PY" main.py --workdir="$wd" "$@" > "$wd.console.txt" 2>&1 || { tail -3 "$wd.console.txt"; exit 1; }
}
if [ $SUMMARY_ONLY = 0 ]; then
  for pair in cifar10:cifar-10 cifar100:cifar-100; do
    d=data/${pair%%:*}
    [ -d "$d" ] || { echo "error: $d does not exist; make it with: python -m vit_jax_struct.data.prepare" \
                          "--cifar=PATH/${pair#*:}-python.tar.gz --out=$d" >&2; exit 2; }
  done
  run "$ROOT/pretrain_cifar100" --config=configs/cifar10_vit.py:steps=2000 --config.data.root=data/cifar100 \
      --config.data.num_classes=100 --config.data.in_memory=True
  for s in 0 1 2; do
    run "$ROOT/finetuned,seed=$s" --config=configs/cifar10_vit.py:steps=500 --config.data.in_memory=True \
        --config.init_from="$ROOT/pretrain_cifar100" --config.seed=$s
    run "$ROOT/scratch,seed=$s" --config=configs/cifar10_vit.py:steps=500 --config.data.in_memory=True \
        --config.seed=$s
  done
fi
"$PY" - "$ROOT" <<'PY'
import json, os, sys
from vit_jax_struct import stats
root = sys.argv[1]
acc = lambda name: [json.load(open(os.path.join(root, f"{name},seed={s}", "final_metrics.json")))["eval/accuracy"]
                    for s in range(3)]
pre = json.load(open(os.path.join(root, "pretrain_cifar100", "final_metrics.json")))["eval/accuracy"]
ft, sc = acc("finetuned"), acc("scratch")
e = stats.welch([100 * a for a in ft], [100 * a for a in sc])
print(f"pretrained on CIFAR-100 (2,000 steps): CIFAR-100 top-1 {100 * pre:.1f} %")
print(f"CIFAR-10 top-1 after 500 steps, seeds 0-2: fine-tuned {', '.join(f'{100 * a:.1f}' for a in ft)} "
      f"(mean {100 * sum(ft) / 3:.1f} %); from scratch {', '.join(f'{100 * a:.1f}' for a in sc)} "
      f"(mean {100 * sum(sc) / 3:.1f} %)")
print(f"fine-tuned - scratch: {e.delta:+.1f} points, 95 % CI [{e.low:+.1f}, {e.high:+.1f}] (Welch, df {e.df:.1f}), "
      f"n = 3 + 3")
PY
