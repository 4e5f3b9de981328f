#!/bin/bash
#SBATCH --job-name=single_gpu_task
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=0:10:00
# The container sees exactly the GPU the scheduler assigned (NVIDIA_VISIBLE_DEVICES).
nvidia-smi -L
echo "job $SLURM_JOB_ID on $SLURMD_NODENAME, GPU index $SLURM_JOB_GPUS"
