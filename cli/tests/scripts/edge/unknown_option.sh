#!/bin/bash
#SBATCH -N 2 -N 3
#SBATCH --bogus=1
echo
