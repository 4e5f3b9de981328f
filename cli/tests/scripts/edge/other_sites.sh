#!/bin/bash
#SBATCH -A myproject --qos=high
#SBATCH --mail-type=END,FAIL --mail-user=alice@example.com
#SBATCH --comment="nightly run" --signal=B:USR1@60
#SBATCH --requeue --open-mode=append -N 2
#SBATCH --time=-1 --licenses=fluent:2 --chdir=/tmp
echo
