# Source this file to point SLURM client commands (sinfo, sbatch, squeue, sacct, scancel) and
# submitit at the test cluster started by scripts/slurm/up.sh:   source scripts/slurm/env.sh
export SLURM_CONF="${HERO_SLURM_DIR:-/tmp/hero-slurm}/etc/slurm.conf"
