#!/bin/bash
#SBATCH --exclusive=topo
srun hostname
