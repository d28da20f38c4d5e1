#!/usr/bin/env bash
# Train on a Cloud TPU VM slice: create it, copy this repository to every worker, install, run main.py on all
# workers at once (one process per host; with --config.multihost=True main.py joins them through
# jax.distributed.initialize, which reads coordinator, process count and index from the TPU metadata, and fails
# within --config.distributed.initialization_timeout [1800 s] if a worker does not join).
#
#   launch/tpu_vm.sh create  NAME ZONE ACCELERATOR [VERSION]    e.g. launch/tpu_vm.sh create vit-l us-central2-b v4-32
#   launch/tpu_vm.sh setup   NAME ZONE                           copy + pip install on all workers
#   launch/tpu_vm.sh run     NAME ZONE CONFIG WORKDIR [FLAGS…]   e.g. … run vit-l us-central2-b configs/vit_l16.py gs://bucket/runs/vit_l16
#   launch/tpu_vm.sh delete  NAME ZONE
#
# WORKDIR must be visible to every host (a GCS bucket path, or a shared filesystem): Orbax writes one checkpoint
# from all hosts together. Rerunning `run` with the same WORKDIR resumes from its last checkpoint; a pre-empted
# (SIGTERM'd) run checkpoints at the step all hosts agree on before it exits.
set -euo pipefail
cmd=${1:?usage: $0 create|setup|run|delete NAME ZONE …}; name=${2:?NAME}; zone=${3:?ZONE}
here=$(cd "$(dirname "$0")/.." && pwd)
tpu() { gcloud compute tpus tpu-vm "$@" --zone="$zone"; }
case "$cmd" in
  create)
    accel=${4:?ACCELERATOR, e.g. v4-32}; version=${5:-tpu-ubuntu2204-base}
    tpu create "$name" --accelerator-type="$accel" --version="$version" ;;
  setup)
    tar czf /tmp/vit_jax_struct.tgz -C "$here" --exclude=.git --exclude='.venv*' --exclude=runs .
    tpu scp /tmp/vit_jax_struct.tgz "$name":/tmp/ --worker=all
    tpu ssh "$name" --worker=all --command="mkdir -p ~/vit_jax_struct && tar xzf /tmp/vit_jax_struct.tgz -C ~/vit_jax_struct \
      && cd ~/vit_jax_struct && python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt \
      && .venv/bin/pip install -q 'jax[tpu]==$(grep '^jax==' "$here/requirements.txt" | cut -d= -f3)'" ;;
  run)
    config=${4:?CONFIG}; workdir=${5:?WORKDIR}; shift 5
    # One host per networkEndpoint; with more than one, a local path would be a different disk on each host.
    hosts=$(tpu describe "$name" --format='value(networkEndpoints[].ipAddress)' | tr ';,' '\n\n' | grep -c . || true)
    if [ "${hosts:-0}" -gt 1 ] && [[ "$workdir" != gs://* ]]; then
      echo "refusing WORKDIR=$workdir: $name has $hosts hosts, and a local path would be a separate disk on each" \
           "(each host would write its own checkpoint shards and metrics, and no host could resume)." \
           "Use a bucket, e.g. gs://BUCKET/runs/$(basename "$workdir")." >&2
      exit 2
    fi
    tpu ssh "$name" --worker=all --command="cd ~/vit_jax_struct && nohup .venv/bin/python main.py \
      --config=$config --workdir=$workdir --config.multihost=True $* > ~/train.log 2>&1 &" ;;
  delete)
    tpu delete "$name" --quiet ;;
  *) echo "unknown command $cmd (create|setup|run|delete)" >&2; exit 2 ;;
esac
