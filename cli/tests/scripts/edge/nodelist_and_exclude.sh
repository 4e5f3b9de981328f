#!/bin/bash
#SBATCH -w gpu[001-002] --exclude=gpu005
#SBATCH --exclusive=user -N 2-4
srun hostname
