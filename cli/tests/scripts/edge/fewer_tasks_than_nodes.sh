#!/bin/bash

#SBATCH -n 2

   
#SBATCH -N 4 
  echo
#SBATCH -c 3
