#!/bin/bash
#SBATCH --nice=-5 -t 1-0 --mem=64000 --exclusive
#SBATCH --gpus=4 --cpus-per-task=8 --dependency=afterany:7?afterok:8 -N 1-3
echo
