#!/bin/bash
#SBATCH --job-name='a"b' --error "e#1.err"
echo
