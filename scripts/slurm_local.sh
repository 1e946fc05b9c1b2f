#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for trying gpueval's sharded runs (`gpueval slurm`)
# and for the tests that drive them (tests/slurm/): Debian's slurm-wlm and munge, no systemd,
# everything under one folder. Needs root (slurmd runs jobs as their submitter; munged runs as
# user munge).
#   scripts/slurm_local.sh start [DIR] [--owner PID]
#       install what is missing, write DIR/slurm.conf, start munged (unless one runs), slurmctld
#       and slurmd; wait until the node is idle; print `export SLURM_CONF=DIR/slurm.conf`.
#       --owner PID: a watcher stops the daemons once PID has exited, so a test that dies
#       (killed by a timeout) leaves no daemons behind.
#   scripts/slurm_local.sh stop [DIR]    stop what `start` started (by pid files), and wait for it
#   scripts/slurm_local.sh status [DIR]  sinfo and squeue
# DIR defaults to /tmp/gpueval-slurm. One node named by `hostname -s` with every CPU, each CPU
# allocated on its own (SelectTypeParameters=CR_CPU), jobs requeueable (JobRequeue=1).
set -euo pipefail
cmd="${1:-}"
dir="${2:-/tmp/gpueval-slurm}"
owner=""
if [ "${3:-}" = "--owner" ]; then owner="${4:?--owner needs a pid}"; fi
conf="$dir/slurm.conf"

die() { echo "slurm_local.sh: $*" >&2; exit 1; }

# Waits (up to $2 tenths of a second) for the process in pid file $1 to exit; then SIGKILL.
stop_pidfile() {
  local f="$1" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  rm -f "$f"
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

stop() {
  stop_pidfile "$dir/run/watcher.pid"
  if [ -f "$dir/run/slurmctld.pid" ]; then
    SLURM_CONF="$conf" scancel --user=root 2>/dev/null || true  # this cluster's jobs
  fi
  if [ -f "$dir/run/slurmd.pid" ]; then
    stop_pidfile "$dir/run/slurmd.pid"
    pkill -x slurmstepd 2>/dev/null || true  # job steps of that slurmd that outlived it
  fi
  stop_pidfile "$dir/run/slurmctld.pid"
  stop_pidfile "$dir/run/munged.pid"  # only when start started it
}

start() {
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd and munged need it)"
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
  fi
  mkdir -p "$dir"/{state,spool,log,run} /etc/munge /var/log/munge /run/munge /var/lib/munge
  [ -f /etc/munge/munge.key ] || mungekey --create
  chown -R munge:munge /etc/munge /var/log/munge /run/munge /var/lib/munge
  if ! pgrep -x munged >/dev/null; then
    rm -f /run/munge/munged.pid
    su -s /bin/sh munge -c "munged --force"
    # munged daemonizes; its own pid file names the daemon.
    for _ in $(seq 1 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$dir/run/munged.pid" 2>/dev/null || die "munged did not start; see /var/log/munge/"
  fi
  local host
  host=$(hostname -s)
  cat > "$conf" <<CONF
ClusterName=gpueval
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobRequeue=1
ReturnToService=2
MpiDefault=none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$conf"
  # -c: a clean start, no jobs from an earlier cluster in this folder.
  slurmctld -c -f "$conf"
  slurmd -f "$conf"
  if [ -n "$owner" ]; then
    # The watcher: once the owner is gone, stop everything (a test killed by its timeout).
    ( trap '' HUP; while kill -0 "$owner" 2>/dev/null; do sleep 1; done; rm -f "$dir/run/watcher.pid"
      "$0" stop "$dir" ) \
      </dev/null >"$dir/log/watcher.log" 2>&1 &
    echo $! > "$dir/run/watcher.pid"
  fi
  # Ready when the node reports idle (within a few seconds).
  for _ in $(seq 1 300); do
    if sinfo -h -o '%t' 2>/dev/null | grep -q idle; then
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    sleep 0.1
  done
  stop
  die "the node did not come up within 30 s; see $dir/log/"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF="$conf" sinfo; SLURM_CONF="$conf" squeue ;;
  *) die "usage: $0 start|stop|status [DIR] [--owner PID]" ;;
esac
