#!/bin/bash
#SBATCH --exclusive user
echo
