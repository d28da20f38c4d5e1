#!/usr/bin/env bash
# Example SLURM job for a GPU cluster: one process per node, all GPUs of a node in that process.
# main.py with --config.multihost=True joins the processes (vit_jax_struct/train/distributed.py): the coordinator is
# the job's first node, the process count SLURM_NTASKS, each process's index its SLURM_PROCID (read by jax).
# JAX_LOCAL_DEVICE_IDS keeps every GPU of the node: jax's SLURM detection alone would give each process only GPU
# SLURM_LOCALID (0 with one task per node).
#
#   sbatch --nodes=4 launch/gpu_slurm.sh configs/vit_l16.py /shared/runs/vit_l16
#SBATCH --job-name=vit_jax_struct
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --signal=TERM@120
set -euo pipefail
config=${1:?CONFIG}; workdir=${2:?WORKDIR (on a filesystem every node sees)}; shift 2
coordinator="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1):$((SLURM_JOB_ID % 4096 + 61440))"
gpus=$(seq -s, 0 $((${SLURM_GPUS_ON_NODE:-8} - 1)))
# Install once beforehand: .venv/bin/pip install -r requirements.txt 'jax[cuda12]==<jax version in requirements.txt>'
srun --export=ALL,JAX_LOCAL_DEVICE_IDS="$gpus" .venv/bin/python main.py --config="$config" --workdir="$workdir" \
  --config.multihost=True --config.distributed.coordinator_address="$coordinator" \
  --config.distributed.num_processes="$SLURM_NTASKS" "$@"
