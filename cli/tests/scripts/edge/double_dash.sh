#!/bin/bash
#SBATCH -N 2 -- -N 3
echo
