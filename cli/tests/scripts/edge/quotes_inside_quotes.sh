#!/bin/bash
#SBATCH --job-name='a"b' --dependency "afterok:5#9"
echo
