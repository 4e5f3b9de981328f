#!/bin/bash
#SBATCH -t 0 --gres=gpu:a100:2 --switches=2@1:00:00 --gpu-bind=closest -N 2
echo
