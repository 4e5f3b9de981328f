#!/bin/bash
#SBATCH --job-name=train
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=96
#SBATCH --exclusive
#SBATCH --switches=1@30:00
#SBATCH --time=2-00:00:00
# The script runs once, on the first node; srun starts one torchrun per node, which meet at
# the first node (c10d rendezvous) and start 8 ranks each.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun \
  --nnodes="$SLURM_NNODES" \
  --nproc_per_node=8 \
  --rdzv_id="$SLURM_JOB_ID" \
  --rdzv_backend=c10d \
  --rdzv_endpoint="$head:29500" \
  train.py --fsdp --bf16
