#!/bin/bash
#SBATCH --job-name=ray_rl
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=8:00:00
# The script runs once, on the first node; srun starts Ray on every node, the first node's
# the head, and the driver runs once the cluster has every node.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun --nodes="$SLURM_NNODES" --ntasks="$SLURM_NNODES" \
  ray symmetric-run --address "$head:6379" --min-nodes "$SLURM_NNODES" \
  --num-gpus="$SLURM_GPUS_ON_NODE" -- python train_rl.py
