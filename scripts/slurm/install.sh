#!/usr/bin/env bash
# Install the packages of a single-node SLURM with accounting (Debian/Ubuntu, as root).
# Idempotent: does nothing when every package is already installed.
#   munge slurmctld slurmd slurm-client   the scheduler itself
#   slurmdbd mariadb-server               accounting, so that `sacct` (and submitit's job states) work
# Daemons are NOT started here and the packages' own services are kept from starting
# (policy-rc.d), so the machine's state is only changed by scripts/slurm/up.sh.
set -euo pipefail

PKGS=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "slurm-install: all packages present (${PKGS[*]})"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

echo "slurm-install: installing ${missing[*]}"
start=$(date +%s)
# Keep the package scripts from starting daemons (no systemd in containers anyway).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/hero-slurm-install.log 2>&1; then
    # The package lists may be missing or stale (fresh container): update once and retry.
    $SUDO apt-get update -q >>/tmp/hero-slurm-install.log 2>&1
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/hero-slurm-install.log 2>&1 || {
        tail -n 30 /tmp/hero-slurm-install.log >&2
        echo "slurm-install: apt-get install failed (log: /tmp/hero-slurm-install.log)" >&2
        exit 1
    }
fi
echo "slurm-install: done in $(( $(date +%s) - start )) s"
