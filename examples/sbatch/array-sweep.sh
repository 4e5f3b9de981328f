#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-15%4
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem-per-gpu=32G
#SBATCH --time=1:00:00
lrs=(1e-5 2e-5 5e-5 1e-4 2e-4 5e-4 1e-3 2e-3 5e-3 1e-2 2e-2 5e-2 1e-1 2e-1 5e-1 1)
lr=${lrs[$SLURM_ARRAY_TASK_ID]}
echo "array job $SLURM_ARRAY_JOB_ID index $SLURM_ARRAY_TASK_ID: lr=$lr"
python sweep.py --lr "$lr" --out "/results/$SLURM_ARRAY_JOB_ID/$SLURM_ARRAY_TASK_ID"
