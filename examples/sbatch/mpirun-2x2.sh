#!/bin/bash
#SBATCH --job-name=mpirun_test
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=0:10:00
set -euo pipefail
mkdir -p ~/.ssh && cp /etc/mpi-ssh/* ~/.ssh/ && chmod 600 ~/.ssh/id_ed25519
printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' > ~/.ssh/config
ssh-keygen -A && /usr/sbin/sshd -e
base=${MASTER_ADDR%%.*}; base=${base%-0}; svc=${MASTER_ADDR#*.}
if [ "$SLURM_PROCID" != 0 ]; then
  # Serve rank 0's ssh sessions until it says the run is over.
  until [ -f /tmp/mpirun-done ]; do sleep 2; done
  exit 0
fi
hosts=""
for r in $(seq 0 $((SLURM_NTASKS - 1))); do
  h="$base-$r.$svc"; hosts+="${hosts:+,}$h:1"
  until ssh -o ConnectTimeout=2 "$h" true; do sleep 2; done
done
status=0
mpirun -np "$SLURM_NTASKS" --host "$hosts" --allow-run-as-root \
  -x NCCL_DEBUG=WARN /opt/app/gpu_aware_app || status=$?
for r in $(seq 1 $((SLURM_NTASKS - 1))); do ssh "$base-$r.$svc" touch /tmp/mpirun-done; done
exit $status
