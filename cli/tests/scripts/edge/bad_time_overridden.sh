#!/bin/bash
#SBATCH --time=1h
echo
