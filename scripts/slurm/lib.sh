# Shared by up.sh and down.sh (sourced, not run).

# alive <pidfile> [name]: the pid in the file runs AND is the daemon we started (a stale pid file
# whose pid now belongs to another process is not ours: never signal it).
alive() {
    local pid name
    [ -f "$1" ] || return 1
    pid="$(cat "$1" 2>/dev/null)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    name="${2:-$(basename "$1" .pid)}"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]
}
