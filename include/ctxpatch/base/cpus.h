/* Floor: base. How many CPUs this process may use, for default thread counts: the CPUs of its
 * affinity mask (taskset, a cgroup cpuset, Slurm's binding), lowered to SLURM_CPUS_PER_TASK when
 * that holds a smaller positive count (Slurm sets it from --cpus-per-task even where it does not
 * bind), at least 1. Reads the process state each call; allocates nothing. */
#ifndef CTXPATCH_BASE_CPUS_H
#define CTXPATCH_BASE_CPUS_H

int cp_cpu_count(void);

#endif
