#!/usr/bin/env bash
# Example SLURM job for a GPU cluster: one process per node, all GPUs of a node in that process.
# jax.distributed.initialize() (main.py with --config.multihost=True) reads the coordinator address, process
# count and index from SLURM's environment.
#
#   sbatch --nodes=4 launch/gpu_slurm.sh configs/vit_l16.py /shared/runs/vit_l16
#SBATCH --job-name=vit_jax_struct
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --signal=TERM@120
set -euo pipefail
config=${1:?CONFIG}; workdir=${2:?WORKDIR (on a filesystem every node sees)}; shift 2
# Install once beforehand: .venv/bin/pip install -r requirements.txt 'jax[cuda12]==<jax version in requirements.txt>'
srun .venv/bin/python main.py --config="$config" --workdir="$workdir" --config.multihost=True "$@"
