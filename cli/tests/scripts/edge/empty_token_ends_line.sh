#!/bin/bash
#SBATCH -J a "" -N 3
#SBATCH -n 2 #x -c 5
echo
