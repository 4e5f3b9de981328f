#!/bin/bash
#SLURM -N 3
#SBATCH -J x
#SLURM --time=5
echo
