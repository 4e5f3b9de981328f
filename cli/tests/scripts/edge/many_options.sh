#!/bin/bash
#SBATCH --requeue --hold --nice --priority=10 -a 0-15:4%2 -d afterok:1:2,singleton
#SBATCH --gpus-per-task=a100:1 -n 4 --mem-per-gpu=10G --switches=1 -t UNLIMITED -Q
#SBATCH --gpu-bind=map_gpu:0,1 -C "[a*2&b*1]"
echo
