#!/bin/bash
#SBATCH --job-name=mpirun_test
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=0:10:00
mpirun -np 4 /opt/app/gpu_aware_app
