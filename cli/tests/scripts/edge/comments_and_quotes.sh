#!/bin/bash
#SBATCH --job-name=run#1
#SBATCH --part=gpu -N 3 # comment here
#SBATCH--time=5
#SBATCH	-c 4
##SBATCH -n 7
# SBATCH -n 8
 #SBATCH -n 9
#sbatch -n 10
#SBATCH --output='a b.out' --error "x#y.err"

echo hi
#SBATCH --ntasks=99
