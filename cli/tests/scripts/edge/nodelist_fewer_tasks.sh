#!/bin/bash
#SBATCH -w gpu003,gpu001
#SBATCH -n 1
srun hostname
