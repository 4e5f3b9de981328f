#!/bin/bash
#SBATCH -J
#SBATCH -N 2
echo
