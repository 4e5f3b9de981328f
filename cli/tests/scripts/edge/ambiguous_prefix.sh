#!/bin/bash
#SBATCH --gp=1
echo
