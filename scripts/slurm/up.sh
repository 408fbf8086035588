#!/usr/bin/env bash
# Start a real single-node SLURM (with accounting) on this machine, for tests and local trials.
#
#   scripts/slurm/install.sh      once: the Debian packages
#   scripts/slurm/up.sh           munged, mariadbd, slurmdbd, slurmctld, slurmd (pid files in the state dir)
#   scripts/slurm/env.sh          `source` it (or export SLURM_CONF=$STATE/etc/slurm.conf) to use sinfo/sbatch/sacct
#   scripts/slurm/down.sh         stop exactly the daemons started here
#
# Everything lives in one state dir, ${HERO_SLURM_DIR:-/tmp/hero-slurm}: generated configs, munge key
# and socket, database files, spool, logs, pid files. Nothing under /etc is changed except adding
# "127.0.0.1 <host>" to /etc/hosts when the host name does not resolve. The configuration is that
# of a small real cluster: cons_tres with CR_Core_Memory, accounting through slurmdbd (so sacct and
# submitit's job states work), and short credential/scheduler intervals so a requeued job restarts
# in seconds. No cgroups (containers): proctrack/linuxproc, task/none.
#
# Knobs (environment): HERO_SLURM_DIR, HERO_SLURM_CPUS (CPUs advertised by the node, default 8, may
# exceed the real count), HERO_SLURM_PORT_BASE (default 6817: ctld, +1 slurmd, +2 slurmdbd),
# HERO_SLURM_FRESH=1 (wipe the state dir first).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${HERO_SLURM_DIR:-/tmp/hero-slurm}"
CPUS="${HERO_SLURM_CPUS:-8}"
PORT="${HERO_SLURM_PORT_BASE:-6817}"
CLUSTER=hero
PARTITION=debug
t0=$(date +%s%N)

log() { printf 'slurm-up: %s\n' "$*"; }
die() { printf 'slurm-up: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (starts munged/slurmd/slurmctld)"
for b in munged mariadbd slurmdbd slurmctld slurmd sacctmgr sinfo; do
    command -v "$b" >/dev/null || die "$b not found: run scripts/slurm/install.sh (make slurm-install)"
done

source "$HERE/lib.sh"

if [ "${HERO_SLURM_FRESH:-0}" = 1 ] && [ -d "$STATE" ]; then
    "$HERE/down.sh" >/dev/null 2>&1 || true
    rm -rf "$STATE"
fi

mkdir -p "$STATE"/{etc,log,run,spool/ctld,spool/d,munge,munge-key,mysql}
chmod 755 "$STATE"

HOST="$(hostname -s)"
if ! getent hosts "$HOST" >/dev/null; then
    echo "127.0.0.1 $HOST" >>/etc/hosts
    log "added '127.0.0.1 $HOST' to /etc/hosts"
fi

MYSQL_SOCK="$STATE/mysql/mysqld.sock"
export SLURM_CONF="$STATE/etc/slurm.conf"
export MYSQL_UNIX_PORT="$MYSQL_SOCK"

# ---------------------------------------------------------------- munge
# Slurm 22.05 clients reach slurmdbd through munge's DEFAULT socket whatever AuthInfo says, so
# munged listens on /run/munge/munge.socket.2. If a munged already answers there (a system one),
# it is used as it is and left alone; otherwise ours runs as the munge user with the key from the
# state dir (munge:munge 0400 in a 0700 dir) and its pid file in the state dir.
MUNGE_SOCK=/run/munge/munge.socket.2
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
    KEY="$STATE/munge-key/munge.key"
    [ -f "$KEY" ] || dd if=/dev/urandom of="$KEY" bs=1 count=1024 status=none
    chown -R munge:munge "$STATE/munge" "$STATE/munge-key"
    chmod 755 "$STATE/munge"
    chmod 700 "$STATE/munge-key"
    chmod 400 "$KEY"
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 755 /run/munge
    if ! alive "$STATE/munge/munged.pid"; then
        rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
        runuser -u munge -- munged --key-file="$KEY" \
            --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
            --seed-file="$STATE/munge/munged.seed" --num-threads=10 \
            || die "munged failed: $(tail -n 5 "$STATE/munge/munged.log" 2>/dev/null)"
    fi
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || die "munge does not answer on $MUNGE_SOCK"
elif ! alive "$STATE/munge/munged.pid"; then
    log "using the munged already answering on $MUNGE_SOCK (not started here, left alone)"
fi

# ---------------------------------------------------------------- mariadb (socket only, no network)
chown mysql:mysql "$STATE/mysql"
if [ ! -d "$STATE/mysql/data/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$STATE/mysql/data" --skip-test-db \
        --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 \
        || die "mariadb-install-db failed: see $STATE/log/mariadb-install.log"
fi
if ! alive "$STATE/mysql/mysqld.pid" mariadbd; then
    # --no-defaults: ignore /etc/mysql so a system MariaDB (if any) is not disturbed.
    mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql/data" --socket="$MYSQL_SOCK" \
        --pid-file="$STATE/mysql/mysqld.pid" --skip-networking --log-error="$STATE/log/mariadb.log" \
        --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 --skip-log-bin \
        >/dev/null 2>&1 &
fi
for _ in $(seq 150); do
    [ -S "$MYSQL_SOCK" ] && mariadb --no-defaults --socket="$MYSQL_SOCK" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
done
mariadb --no-defaults --socket="$MYSQL_SOCK" -uroot -e 'SELECT 1' >/dev/null 2>&1 \
    || die "mariadbd does not answer on $MYSQL_SOCK: $(tail -n 5 "$STATE/log/mariadb.log")"
DBPASS_FILE="$STATE/etc/dbpass"
[ -f "$DBPASS_FILE" ] || { head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$DBPASS_FILE"; chmod 600 "$DBPASS_FILE"; }
DBPASS="$(cat "$DBPASS_FILE")"
mariadb --no-defaults --socket="$MYSQL_SOCK" -uroot <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL

# ---------------------------------------------------------------- configs
# The node line comes from the hardware (slurmd -C) but may advertise more CPUs than exist
# (SlurmdParameters=config_overrides) so that a sweep array and a 2-task DDP job fit at once.
read -r -a NODE_FIELDS <<<"$(slurmd -C | head -n 1)"
MEM=1024
for f in "${NODE_FIELDS[@]}"; do case "$f" in RealMemory=*) MEM="${f#RealMemory=}";; esac; done

cat >"$STATE/etc/slurm.conf" <<CONF
# Generated by scripts/slurm/up.sh — a single-node test cluster. Do not edit; rerun up.sh.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
EnforcePartLimits=ALL
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_interval=2
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
MaxArraySize=10001
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((PORT + 2))
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

cat >"$STATE/etc/slurmdbd.conf" <<CONF
# Generated by scripts/slurm/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
CONF
chmod 600 "$STATE/etc/slurmdbd.conf"
chmod 644 "$STATE/etc/slurm.conf"
# Client commands find the cluster through this file (see env.sh).
printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" >"$STATE/env.sh"

# ---------------------------------------------------------------- slurmdbd, cluster registration
if ! alive "$STATE/run/slurmdbd.pid"; then
    slurmdbd || die "slurmdbd failed: $(tail -n 5 "$STATE/log/slurmdbd.log")"
fi
ok=0
for _ in $(seq 100); do
    if sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.1
done
[ $ok = 1 ] || die "slurmdbd does not answer: $(tail -n 5 "$STATE/log/slurmdbd.log")"
if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

# ---------------------------------------------------------------- slurmctld, slurmd
alive "$STATE/run/slurmctld.pid" || slurmctld || die "slurmctld failed: $(tail -n 5 "$STATE/log/slurmctld.log")"
alive "$STATE/run/slurmd.pid" || slurmd || die "slurmd failed: $(tail -n 5 "$STATE/log/slurmd.log")"

ok=0
for _ in $(seq 300); do
    st="$(sinfo -h -N -n "$HOST" -o %t 2>/dev/null || true)"
    case "$st" in idle|mix|alloc) ok=1; break;; esac
    sleep 0.1
done
[ $ok = 1 ] || { sinfo -N >&2 || true; die "node $HOST not idle (state '${st:-?}'); logs in $STATE/log"; }
sacct -n -X -S now-1minutes >/dev/null 2>&1 || die "sacct does not answer; logs in $STATE/log"

ms=$(( ($(date +%s%N) - t0) / 1000000 ))
log "up in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s: cluster=$CLUSTER partition=$PARTITION node=$HOST cpus=$CPUS state dir=$STATE"
log "use it with: export SLURM_CONF=$SLURM_CONF   (or: source $STATE/env.sh)"
