#!/bin/bash
#SBATCH --job-name=ray_rl
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=8:00:00
set -uo pipefail
head="$MASTER_ADDR:6379"
if [ "$SLURM_PROCID" = 0 ]; then
  ray start --head --port=6379 --num-gpus="$SLURM_GPUS_ON_NODE" --disable-usage-stats
  # Wait for every worker, then run the driver.
  until [ "$(python -c 'import ray; ray.init(address="auto"); print(len(ray.nodes()))' 2>/dev/null)" = "$SLURM_NNODES" ]; do sleep 5; done
  python train_rl.py; status=$?
  ray stop
  exit $status
fi
until ray start --address="$head" --num-gpus="$SLURM_GPUS_ON_NODE" --disable-usage-stats; do sleep 5; done
# A worker's job is done when its head is gone.
while ray status --address="$head" >/dev/null 2>&1; do sleep 15; done
ray stop
exit 0
