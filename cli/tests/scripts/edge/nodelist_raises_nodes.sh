#!/bin/bash
#SBATCH -w gpu[001-003]
#SBATCH -N 2-5
srun hostname
