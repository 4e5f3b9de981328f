#!/bin/bash
#SBATCH --job-name=interactive
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2
#SBATCH --gpu-bind=closest
#SBATCH --cpus-per-task=16
#SBATCH --mem=128G
#SBATCH --time=2:00:00
echo "rank $SLURM_PROCID of job $SLURM_JOB_ID ready on $SLURMD_NODENAME (GPUs $SLURM_JOB_GPUS)"
exec sleep infinity
