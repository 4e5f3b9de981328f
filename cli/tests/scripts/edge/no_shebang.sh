#SBATCH -N 2
echo
