#!/bin/bash
#SBATCH -J
#SBATCH -N
echo
