#!/bin/bash
#SBATCH -t 2:30 --mem-per-cpu=2g --gres=gpu --array=1,3,5-7
echo
