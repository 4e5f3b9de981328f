#!/bin/bash
#SBATCH --tasks-per-node=3 --gpus-per-node=2 --mem=16gb
echo
