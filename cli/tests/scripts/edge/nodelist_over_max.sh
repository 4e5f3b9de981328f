#!/bin/bash
#SBATCH -N 2
#SBATCH -w gpu[001-003]
srun hostname
