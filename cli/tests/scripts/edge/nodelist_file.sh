#!/bin/bash
#SBATCH --nodelist=./nodes.txt
#SBATCH -x ./nodes.txt -w gpu007
srun hostname
