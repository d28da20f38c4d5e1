# Shared start of the GPU scripts (sourced by benchmarks/gpu_paper_scale.sh and benchmarks/gpu_regime.sh, from the
# repository root): checks `OUT [--smoke]`, sets OUT, SMOKE, PY ($PYTHON, default python3) and LOG ($OUT/log.txt),
# defines `say` (a timestamped line to the terminal and the log) and writes $OUT/env.txt (GPU, jax, cores).
OUT=${1:?usage: bash $SCRIPT OUT [--smoke]}
SMOKE=${2:-}
if [[ -n "$SMOKE" && "$SMOKE" != "--smoke" ]]; then
  echo "error: second argument '$SMOKE' is not --smoke" >&2; exit 2
fi
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
export PYTHONUNBUFFERED=1
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__); print(jax.devices())"
  nproc; } > "$OUT/env.txt" 2>&1
say "env: $(tr '\n' ' ' < "$OUT/env.txt" | cut -c1-300)"
