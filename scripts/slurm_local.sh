#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for trying gpueval's sharded runs (issue 14) and
# for the tests that will drive them: Debian's slurm-wlm and munge, no systemd, everything under
# one folder. Needs root (slurmd runs jobs as their submitter; munged runs as user munge).
#   scripts/slurm_local.sh start [DIR]   install what is missing, write DIR/slurm.conf, start
#                                        munged, slurmctld and slurmd; prints `export SLURM_CONF=...`
#   scripts/slurm_local.sh stop [DIR]    stop the daemons started from DIR (by their pid files)
#   scripts/slurm_local.sh status [DIR]  sinfo and squeue
# DIR defaults to /tmp/gpueval-slurm. Checked by hand: a 3-task `sbatch --array=0-2` job and an
# `--dependency=afterok` job after it complete within about 15 s on a 2-core machine.
set -euo pipefail
cmd="${1:-}"
dir="${2:-/tmp/gpueval-slurm}"
conf="$dir/slurm.conf"

die() { echo "slurm_local.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (slurmd and munged need it)"

start() {
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
  fi
  mkdir -p "$dir"/{state,spool,log,run} /etc/munge /var/log/munge /run/munge /var/lib/munge
  [ -f /etc/munge/munge.key ] || mungekey --create
  chown -R munge:munge /etc/munge /var/log/munge /run/munge /var/lib/munge
  pgrep -x munged >/dev/null || su -s /bin/sh munge -c "munged --force"
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
  slurmctld -f "$conf"
  slurmd -f "$conf"
  # Ready when the node reports idle (within a few seconds).
  for _ in $(seq 1 30); do
    if sinfo -h -o '%t' 2>/dev/null | grep -q idle; then
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    sleep 1
  done
  die "the node did not come up; see $dir/log/"
}

stop() {
  for f in "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  pkill -x munged 2>/dev/null || true
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF="$conf" sinfo; SLURM_CONF="$conf" squeue ;;
  *) die "usage: $0 start|stop|status [DIR]" ;;
esac
