#!/usr/bin/env bash
# The rows of docs/scaling.md: ViT-L/16 and ViT-H/14 train steps at global batch 4096 compiled ahead of time for
# TPU slices (benchmarks/memory_plan.py; needs requirements-tpu.txt). Each row appends one JSON line to $OUT; then
#   python benchmarks/memory_plan.py --render=benchmarks/results/scaling.jsonl
# prints the table. Each compile takes minutes on 2 CPU cores: run it in the background, e.g.
#   nohup bash benchmarks/scaling.sh > runs/scaling.log 2>&1 &
# `bash benchmarks/scaling.sh 3 5` runs only rows 3 and 5 (numbered from 1, in the order below).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-benchmarks/results/scaling.jsonl}
L="--config=configs/vit_l16.py"
H="--config=configs/vit_h14.py"
DP="--config.mesh.data=-1 --config.mesh.fsdp=1"
REMAT="--config.model.remat_policy=nothing_saveable"
SCAN="--config.model.scan=True"  # one compiled block instead of 24/32: much shorter compiles, same memory with remat
# The L/H recipes default to remat + scan since 30 Nov 2026: rows without them say so explicitly.
NOREMAT="--config.model.remat_policy=none"
NOSCAN="--config.model.scan=False"
BF16="--config.model.dtype=bfloat16"
ROWS=(
  # Reference point: ViT-L/16, batch 256 on one v4 host, per-block remat (a colleague measured 6.2 GiB temporaries).
  "$L --topology=v4:2x2x1 --batch=256 $REMAT $NOSCAN"
  # ViT-L/16 at the recipe's global batch 4096; L and H default to FSDP over all chips (mesh data=1, fsdp=-1).
  "$L --topology=v4:4x4x4 $REMAT $SCAN"
  "$L --topology=v4:4x4x4 $REMAT $SCAN $DP"
  "$L --topology=v5e:8x8 $BF16 $REMAT $SCAN"
  "$L --topology=v5p:2x2x4 $REMAT $SCAN --config.accum_steps=4"
  "$L --topology=v5e:8x8 $BF16 $REMAT $SCAN $DP"
  # ViT-H/14, global batch 4096.
  "$H --topology=v4:4x4x4 $REMAT $SCAN $DP"
  "$H --topology=v5e:8x8 $BF16 $REMAT $SCAN $DP"
  # One v4 host (4 chips) with gradient accumulation: 16 micro-batches of 64 images per chip.
  "$L --topology=v4:2x2x1 $REMAT $SCAN $DP --config.accum_steps=16"
  "$H --topology=v4:4x4x4 $REMAT $SCAN"
  "$H --topology=v5p:2x2x4 $BF16 $REMAT $SCAN --config.accum_steps=4"
  # Without remat (unscanned, the default model): slower compiles.
  "$L --topology=v4:4x4x4 $NOREMAT $NOSCAN"
  "$L --topology=v4:4x4x4 $BF16 $NOREMAT $NOSCAN"
  "$H --topology=v5p:4x4x4 $NOREMAT $NOSCAN"
  # The CPU fallback for the reference point (fake CPU devices; cannot judge remat).
  "$L --topology=v4:2x2x1 --batch=256 $REMAT $NOSCAN --backend=cpu"
  "$L --topology=v4:2x2x1 --batch=256 $NOREMAT $NOSCAN --backend=cpu"
  # Without remat, scanned (compiles in minutes, unlike rows 12-14), FSDP over all chips.
  "$L --topology=v4:4x4x4 $NOREMAT $SCAN"
  "$L --topology=v5e:8x8 $BF16 $NOREMAT $SCAN"
  # ViT-H/14 on 64 v5e chips: FSDP instead of the marginal data-parallel row 8.
  "$H --topology=v5e:8x8 $BF16 $REMAT $SCAN"
  # Without remat, 4 accumulation micro-batches of 16 images per chip instead.
  "$L --topology=v4:4x4x4 $NOREMAT $SCAN --config.accum_steps=4"
)
for i in "${!ROWS[@]}"; do
  n=$((i + 1))
  if [ $# -gt 0 ] && [[ " $* " != *" $n "* ]]; then continue; fi
  echo "=== row $n: ${ROWS[$i]}  ($(date +%T))"
  # shellcheck disable=SC2086
  timeout 3600 $PY benchmarks/memory_plan.py ${ROWS[$i]} --out="$OUT" 2>&1 \
    | grep -v -E "^(WARNING: Logging before|E0000 |=== Source|learning/|Failed to find host bounds)" \
    || echo "row $n failed"
done
echo "=== done ($(date +%T))"
