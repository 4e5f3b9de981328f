#!/bin/bash
#SBATCH --job-name="unterminated
echo
