#!/bin/bash
#SBATCH --job-name=specific_gpu_task
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:a100:1
#SBATCH --constraint=a100_80gb
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=2:00:00
nvidia-smi --query-gpu=name,memory.total --format=csv
python my_gpu_program.py
