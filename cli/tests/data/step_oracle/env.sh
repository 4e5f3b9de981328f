#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
# Recorded under real Slurm 22.05 (peer.sh, 2 nodes x 4 CPUs) in env.out; compared by
# cli/tests/step_runtime.rs.
echo "== batch env"
env | grep -E '^(SLURM|SLURMD)_' | sort
echo "== srun env task0"
srun -l printenv | grep -E '^0: (SLURM|SLURMD|CUDA|GPU)' | sort
echo "== hostname"
srun hostname
echo "== -l printenv"
srun -l printenv SLURM_PROCID SLURM_LOCALID CUDA_VISIBLE_DEVICES
echo "rc=$?"
