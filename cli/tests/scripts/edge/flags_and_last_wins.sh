#!/bin/bash
#SBATCH --exclusive --nodes 2
#SBATCH --no-requeue -N1
echo
