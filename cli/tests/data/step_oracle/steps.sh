#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
# Recorded under real Slurm 22.05 (peer.sh, nodes n001 and n002 of 4 CPUs) in steps.out;
# cli/tests/step_runtime.rs runs it in a Muster job and compares.
show() { echo "== $*"; }
L='echo "$SLURM_PROCID node=$SLURM_NODEID local=$SLURM_LOCALID host=$SLURMD_NODENAME steptpn=$SLURM_STEP_TASKS_PER_NODE stepnodes=$SLURM_STEP_NODELIST nn=$SLURM_STEP_NUM_NODES nt=$SLURM_STEP_NUM_TASKS ntasks=$SLURM_NTASKS nnodes=$SLURM_NNODES tpn=$SLURM_TASKS_PER_NODE jobnl=$SLURM_JOB_NODELIST nl=$SLURM_NODELIST step=$SLURM_STEP_ID cpt=$SLURM_CPUS_PER_TASK con=$SLURM_CPUS_ON_NODE gtids=$SLURM_GTIDS"'
show "-n 3"; srun -n 3 bash -c "$L" | sort; echo "rc=${PIPESTATUS[0]}"
show "-n 1"; srun -n 1 bash -c "$L" 2>&1 | sort
show "-N 1"; srun -N 1 bash -c "$L" 2>&1 | sort
show "-N 1 -n 1"; srun -N 1 -n 1 bash -c "$L" 2>&1 | sort
show "--ntasks-per-node=1"; srun --ntasks-per-node=1 bash -c "$L" 2>&1 | sort
show "-w n002"; srun -w n002 bash -c "$L" 2>&1 | sort
show "-w n002 -n1"; srun -w n002 -n 1 bash -c "$L" 2>&1 | sort
show "-n 5"; srun -n 5 true; echo "rc=$?"
show "-N 3"; srun -N 3 true; echo "rc=$?"
show "-c 2"; srun -c 2 bash -c "$L" 2>&1 | sort
show "exit"; srun bash -c 'exit $SLURM_PROCID'; echo "rc=$?"
show "signal"; srun bash -c 'if [ $SLURM_PROCID = 1 ]; then kill -9 $$; fi; sleep 1'; echo "rc=$?"
show "sigterm"; srun bash -c 'if [ $SLURM_PROCID = 2 ]; then kill -15 $$; fi; exit 5'; echo "rc=$?"
show "K"; time srun -K bash -c 'if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 20'; echo "rc=$?"
show "partial"; srun -l -n 1 printf 'a\nb'; echo; echo "rc=$?"
show "stdin"; echo hi | srun -l cat | sort
show "export"; FOO=1 BAR=2 srun -n1 --export=FOO bash -c 'echo FOO=$FOO BAR=$BAR PATH=$PATH; env | grep -c SLURM'
show "export NONE"; FOO=1 srun -n1 --export=NONE bash -c 'echo FOO=$FOO PATH=$PATH HOME=$HOME; env | grep -c SLURM' 2>&1
show "export ALL,X=y"; FOO=1 srun -n1 --export=ALL,X=y bash -c 'echo FOO=$FOO X=$X'
show "bad opt"; srun --bogus true; echo "rc=$?"
show "notfound"; srun -n1 nosuchcmd; echo "rc=$?"
show "chdir"; cd /tmp/i14a; srun -n1 pwd; srun -n1 --chdir=/nonexistent pwd; echo "rc=$?"
show "mpirun"; OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 hostname 2>&1 | sort; echo "rc=${PIPESTATUS[0]}"
show "scontrol"; scontrol show hostnames "$SLURM_JOB_NODELIST"; scontrol show hostlist n001,n002
