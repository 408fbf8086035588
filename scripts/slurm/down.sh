#!/usr/bin/env bash
# Stop the single-node SLURM started by scripts/slurm/up.sh: exactly the daemons whose pid files
# are in the state dir (slurmd, slurmctld, slurmdbd, mariadbd, munged), in that order. Jobs still
# on this test cluster are cancelled first so that no job step outlives its daemons.
# The state dir is kept (job ids keep counting, accounting history stays) unless HERO_SLURM_PURGE=1.
set -uo pipefail

STATE="${HERO_SLURM_DIR:-/tmp/hero-slurm}"
t0=$(date +%s%N)
log() { printf 'slurm-down: %s\n' "$*"; }

if [ ! -d "$STATE" ]; then
    log "no state dir $STATE: nothing to stop"
    exit 0
fi
export SLURM_CONF="$STATE/etc/slurm.conf"

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

# Cancel what is left on this cluster (only when our controller is up and answers).
if alive "$STATE/run/slurmctld.pid" slurmctld && [ -f "$SLURM_CONF" ]; then
    ids="$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')"
    if [ -n "${ids// /}" ]; then
        log "cancelling jobs still on the test cluster: $ids"
        # shellcheck disable=SC2086
        timeout 10 scancel $ids 2>/dev/null || true
        for _ in $(seq 50); do
            [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

stop() {  # stop <name> <pidfile>: TERM, wait up to 10 s, then KILL; only that pid.
    local name="$1" pidfile="$2" pid
    [ -f "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    if alive "$pidfile" "$name"; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name ($pid) did not stop on TERM: KILL"
            kill -KILL "$pid" 2>/dev/null
        fi
        log "stopped $name ($pid)"
    fi
    rm -f "$pidfile"
}

stop slurmd "$STATE/run/slurmd.pid"
stop slurmctld "$STATE/run/slurmctld.pid"
stop slurmdbd "$STATE/run/slurmdbd.pid"
stop mariadbd "$STATE/mysql/mysqld.pid"
stop munged "$STATE/munge/munged.pid"

if [ "${HERO_SLURM_PURGE:-0}" = 1 ]; then
    rm -rf "$STATE"
    log "removed $STATE"
fi
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
log "down in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"
