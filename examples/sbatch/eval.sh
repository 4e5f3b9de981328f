#!/bin/bash
#SBATCH --job-name=eval
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=1:00:00
python eval.py --checkpoint /checkpoints/run-1 --report /checkpoints/run-1/eval.json
