#!/bin/bash
#SBATCH --bogus -J ok
#SBATCH --time=1h
#SBATCH -N 0 --mail-type=END
#SBATCH --gres=gpu:a:b:c
#SBATCH --gpu
echo
