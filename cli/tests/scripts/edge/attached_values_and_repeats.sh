#!/bin/bash
#SBATCH -N2 -J"a b"c --time 1-0 -t2:00
#SBATCH --exclusive
#SBATCH --job-name=x\y
echo
