#!/bin/bash
#SBATCH --job-name
