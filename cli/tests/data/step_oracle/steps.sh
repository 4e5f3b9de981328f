#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
# The same script runs under real Slurm 22.05 (peer.sh; output recorded in steps.out) and in
# a Muster job on the test control plane (cli/tests/step_runtime.rs compares the two).
show() { echo "== $*"; }
L='echo "$SLURM_PROCID node=$SLURM_NODEID local=$SLURM_LOCALID host=$SLURMD_NODENAME steptpn=$SLURM_STEP_TASKS_PER_NODE stepnodes=$SLURM_STEP_NODELIST nn=$SLURM_STEP_NUM_NODES nt=$SLURM_STEP_NUM_TASKS ntasks=$SLURM_NTASKS nnodes=$SLURM_NNODES tpn=$SLURM_TASKS_PER_NODE jobnl=$SLURM_JOB_NODELIST nl=$SLURM_NODELIST step=$SLURM_STEP_ID cpt=$SLURM_CPUS_PER_TASK con=$SLURM_CPUS_ON_NODE gtids=$SLURM_GTIDS dist=$SLURM_DISTRIBUTION"'
show "hostname"; srun hostname 2>&1; echo "rc=$?"
show "-l printenv"; srun -l printenv SLURM_PROCID SLURM_LOCALID 2>&1; echo "rc=$?"
show "default"; srun bash -c "$L" 2>&1; echo "rc=$?"
show "-n 3"; srun -n 3 bash -c "$L" 2>&1; echo "rc=$?"
show "-n 1"; srun -n 1 bash -c "$L" 2>&1; echo "rc=$?"
show "-N 1"; srun -N 1 bash -c "$L" 2>&1; echo "rc=$?"
show "-N 1 -n 1"; srun -N 1 -n 1 bash -c "$L" 2>&1; echo "rc=$?"
show "--ntasks-per-node=1"; srun --ntasks-per-node=1 bash -c "$L" 2>&1; echo "rc=$?"
show "-w second"; srun -w "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n1)" bash -c "$L" 2>&1; echo "rc=$?"
show "-w second -n1"; srun -w "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n1)" -n 1 bash -c "$L" 2>&1; echo "rc=$?"
show "-n 5"; srun -n 5 true 2>&1; echo "rc=$?"
show "-N 3"; srun -N 3 true 2>&1; echo "rc=$?"
show "-c 2"; srun -c 2 true 2>&1; echo "rc=$?"
show "-c 2 -n 2"; srun -c 2 -n 2 bash -c "$L" 2>&1; echo "rc=$?"
show "nested"; srun -n 1 bash -c 'srun -n 2 bash -c "echo inner \$SLURM_PROCID of \$SLURM_STEP_NUM_TASKS step \$SLURM_STEP_ID"' 2>&1; echo "rc=$?"
show "exit"; srun bash -c 'exit $SLURM_PROCID' 2>&1; echo "rc=$?"
show "signal"; srun bash -c 'if [ $SLURM_PROCID = 1 ]; then kill -9 $$; fi; sleep 1' 2>&1; echo "rc=$?"
show "sigterm"; srun bash -c 'if [ $SLURM_PROCID = 2 ]; then kill -15 $$; fi; exit 5' 2>&1; echo "rc=$?"
show "kill-on-bad-exit"; srun -K bash -c 'if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 20' 2>&1; echo "rc=$?"
show "partial"; srun -l -n 1 printf 'a\nb' 2>&1; echo; echo "rc=$?"
show "stdin"; echo hi | srun -l cat 2>&1; echo "rc=$?"
show "export"; FOO=1 BAR=2 srun -n1 --export=FOO bash -c 'echo FOO=$FOO BAR=$BAR' 2>&1; echo "rc=$?"
show "export ALL,X=y"; FOO=1 srun -n1 --export=ALL,X=y bash -c 'echo FOO=$FOO X=$X' 2>&1; echo "rc=$?"
show "bad option"; srun --bogus true 2>&1; echo "rc=$?"
show "not found"; srun -n1 nosuchcmd 2>&1; echo "rc=$?"
show "chdir"; srun -n1 --chdir=/nonexistent pwd 2>&1; echo "rc=$?"
show "master"; MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1); echo "master=$MASTER_ADDR"; srun -l bash -c 'echo $(getent hosts '"$MASTER_ADDR"' | wc -l)' 2>&1; echo "rc=$?"
show "mpirun"; OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 hostname 2>&1; echo "rc=$?"
show "end"
