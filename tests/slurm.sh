#!/usr/bin/env bash
# tests/slurm.sh - a real SLURM cluster of logical nodes on this machine, for the test suite.
#
#   bash tests/slurm.sh install  apt-get the packages if they are missing (idempotent)
#   bash tests/slurm.sh up       install (apt, once), start munged, slurmctld and N slurmd;
#                                prints `export` lines (SLURM_CONF, ...) on stdout
#   bash tests/slurm.sh down     cancel jobs, stop the daemons it started (by pid), remove state
#   bash tests/slurm.sh status   exit 0 when every daemon runs and every node is idle/allocated
#   bash tests/slurm.sh login CMD...   run CMD where the cluster's clients run (with SLURM_CONF;
#                                in the login namespace when PILOT_SLURM_NETNS=1)
#
# Needs root (slurmd runs jobs as any user; munged's key).  Settings (environment):
#   PILOT_SLURM_NODES=4   logical nodes node1..nodeN, each a slurmd with its own UTS namespace
#                         (so `hostname` in a task says nodeK)
#   PILOT_SLURM_CPUS=2    CPUs each node advertises (may exceed the machine's)
#   PILOT_SLURM_NETNS=    empty: every daemon on 127.0.0.1, a port each (one host).
#                         1: a cluster of hosts: the login side (slurmctld, and where clients
#                         run: `login`) in network namespace <tag>login with 10.214.1.1 on a
#                         bridge, compute node K in namespace <tag>nodeK with 10.214.1.(10+K)
#                         on a veth link to that bridge.  While the namespaces exist the root
#                         namespace holds a `blackhole 10.214.1.0/24` route, and nothing here
#                         addresses 10.214.1.x from the root namespace (sinfo, scontrol, scancel
#                         run in the login namespace).
#   PILOT_SLURM_TAG=ps    namespace name prefix (netns layout)
#   PILOT_SLURM_DIR=/tmp/pilot-slurm (/tmp/pilot-slurm-netns for the netns layout)
# Pitfalls handled here: no systemd (daemons are started by hand and stopped by pid, never by
# name); Debian builds slurmd with --enable-multiple-slurmd, so N slurmd share one host with
# NodeAddr=127.0.0.1 and a port each; no cgroups (proctrack/linuxproc, task/none); nodes may
# advertise more CPUs than exist (SlurmdParameters=config_overrides); munged must be running
# before slurmctld, and is only stopped here if this script started it (its socket is a file:
# namespaces share it).  Nothing listens beyond ports 16817 (slurmctld) and 17001.. (slurmd),
# on 127.0.0.1 or inside the namespaces.
set -euo pipefail

NETNS=${PILOT_SLURM_NETNS:-}
TAG=${PILOT_SLURM_TAG:-ps}
SUBNET=10.214.1
if [ -n "$NETNS" ]; then DIR=${PILOT_SLURM_DIR:-/tmp/pilot-slurm-netns}
else DIR=${PILOT_SLURM_DIR:-/tmp/pilot-slurm}; fi
NODES=${PILOT_SLURM_NODES:-4}
CPUS=${PILOT_SLURM_CPUS:-2}
CONF=$DIR/etc/slurm.conf
LOGIN=${TAG}login
CTLD_PORT=16817
PORT_BASE=17000

say() { echo "[tests/slurm.sh] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root"

alive() { # pid alive and not a zombie
  [[ ${1:-} =~ ^[0-9]+$ ]] || return 1
  local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
pid_in() { [ -s "$1" ] && cat "$1" || true; }
in_login() { # run where the cluster's clients run
  if [ -n "$NETNS" ]; then nsenter --net="/run/netns/$LOGIN" "$@"; else "$@"; fi
}
sl() { SLURM_CONF=$CONF in_login timeout 10 "$@"; }

env_lines() {
  echo "export SLURM_CONF=$CONF"
  echo "export PILOT_SLURM_NODES=$(cat "$DIR/nodes" 2>/dev/null || echo "$NODES")"
  if [ -n "$NETNS" ]; then
    echo "export PILOT_SLURM_LOGIN_NS=$LOGIN"
    echo "export PILOT_SLURM_LOGIN_ADDR=$SUBNET.1"
  fi
}

ip_() { ip "$@" >&2; }
hosts_up() { # the netns layout: the blackhole route first, then the namespaces and links
  ip route show type blackhole | grep -q "^blackhole $SUBNET.0/24" \
    || ip_ route add blackhole "$SUBNET.0/24"
  local ns k
  for ns in "$LOGIN" $(for k in $(seq "$NODES"); do echo "${TAG}node$k"; done); do
    if [ -e "/run/netns/$ns" ]; then ip_ netns del "$ns"; fi
    ip_ netns add "$ns"; ip_ -n "$ns" link set lo up
  done
  ip_ -n "$LOGIN" link add br0 type bridge
  ip_ -n "$LOGIN" addr add "$SUBNET.1/24" dev br0
  ip_ -n "$LOGIN" link set br0 up
  for k in $(seq "$NODES"); do
    ip_ -n "$LOGIN" link add "v$k" type veth peer name eth0 netns "${TAG}node$k"
    ip_ -n "$LOGIN" link set "v$k" master br0 up
    ip_ -n "${TAG}node$k" addr add "$SUBNET.$((10 + k))/24" dev eth0
    ip_ -n "${TAG}node$k" link set eth0 up
  done
}
hosts_down() { # the namespaces first, the blackhole route last
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${TAG}(login|node[0-9]+)$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip route del blackhole "$SUBNET.0/24" 2>/dev/null || true
}

ensure_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
     && command -v munged >/dev/null && command -v ip >/dev/null && command -v nsenter >/dev/null \
     && command -v mpirun >/dev/null && command -v mpicc.openmpi >/dev/null \
     && ldconfig -p | grep -q 'libfuse\.so\.2'
  then return; fi
  say "installing slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev libfuse2 (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge \
    iproute2 util-linux openmpi-bin libopenmpi-dev libfuse2 >&2
}

munge_up() {
  if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force >&2
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 100); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.05; done
  munge -n | unmunge >/dev/null || die "munged did not start (/var/log/munge/munged.log)"
  cp /run/munge/munged.pid "$DIR/run/munged.pid"   # ours: `down` stops it
}

write_conf() {
  local host; host=$(hostname -s)
  local nodes="node[1-$NODES]" ports="[$((PORT_BASE + 1))-$((PORT_BASE + NODES))]"
  if [ "$NODES" = 1 ]; then nodes=node1; ports=$((PORT_BASE + 1)); fi
  local ctld_addr=127.0.0.1; [ -z "$NETNS" ] || ctld_addr=$SUBNET.1
  cat > "$CONF" <<EOF
# written by tests/slurm.sh: $NODES logical nodes on this machine
ClusterName=pilottest
SlurmctldHost=$host($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd.%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=3
InactiveLimit=0
MinJobAge=300
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  local k line="NodeHostname=$host CPUs=$CPUS RealMemory=2000 State=UNKNOWN"
  if [ -z "$NETNS" ]; then
    echo "NodeName=$nodes NodeAddr=127.0.0.1 Port=$ports $line" >> "$CONF"
  else for k in $(seq "$NODES"); do
    echo "NodeName=node$k NodeAddr=$SUBNET.$((10 + k)) Port=$((PORT_BASE + k)) $line" >> "$CONF"
  done; fi
}

healthy() {
  [ -f "$CONF" ] && alive "$(pid_in "$DIR/run/slurmctld.pid")" || return 1
  local n k; n=$(cat "$DIR/nodes" 2>/dev/null || echo 0)
  for k in $(seq "$n"); do alive "$(pid_in "$DIR/run/slurmd.node$k.pid")" || return 1; done
  sl scontrol ping 2>/dev/null | grep -q UP || return 1
  [ "$(sl sinfo -h -N -o '%N %T' 2>/dev/null | grep -cvE 'down|drain|unk|fail|not_resp')" = "$n" ]
}

up() {
  if healthy && [ "$(cat "$DIR/nodes")" = "$NODES" ]; then say "already up"; env_lines; return; fi
  down >/dev/null 2>&1 || true
  ensure_packages
  mkdir -p "$DIR"/{etc,state,log,run}
  for k in $(seq "$NODES"); do mkdir -p "$DIR/spool/slurmd.node$k"; done
  echo "$NODES" > "$DIR/nodes"
  munge_up
  write_conf
  # clients find the cluster without SLURM_CONF too (only when no other config is there)
  if [ -z "$NETNS" ] && [ ! -e /etc/slurm/slurm.conf ]; then
    mkdir -p /etc/slurm; ln -s "$CONF" /etc/slurm/slurm.conf
  fi
  if [ -n "$NETNS" ]; then hosts_up; fi
  in_login /usr/sbin/slurmctld -c -f "$CONF"
  for _ in $(seq 200); do sl scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.05; done
  sl scontrol ping | grep -q UP || { tail -20 "$DIR/log/slurmctld.log" >&2; die "slurmctld not up"; }
  for k in $(seq "$NODES"); do
    on=(); [ -z "$NETNS" ] || on=(nsenter "--net=/run/netns/${TAG}node$k")
    "${on[@]}" unshare --uts sh -c "hostname node$k && exec /usr/sbin/slurmd -f '$CONF' -N node$k"
  done
  for _ in $(seq 600); do
    [ "$(sl sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" = "$NODES" ] && break; sleep 0.1
  done
  [ "$(sl sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" = "$NODES" ] || {
    sl sinfo -N >&2 || true; die "nodes not idle after 60 s (logs in $DIR/log)"; }
  say "up: node[1-$NODES], $CPUS CPUs each"
  env_lines
}

stop_pid() { # stop_pid PID NAME: SIGTERM, SIGKILL after 10 s
  alive "$1" || return 0
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 100); do alive "$1" || return 0; sleep 0.1; done
  say "$2 ($1) ignored SIGTERM; SIGKILL"; kill -KILL "$1" 2>/dev/null || true
}

down() {
  if [ -f "$CONF" ] && alive "$(pid_in "$DIR/run/slurmctld.pid")"; then
    if sl squeue -h -o %i 2>/dev/null | grep -q .; then
      sl scancel --full --user=root 2>/dev/null || true
      for _ in $(seq 150); do sl squeue -h -t R,CG,PD -o %i 2>/dev/null | grep -q . || break; sleep 0.1; done
    fi
  fi
  local f
  for f in "$DIR"/run/slurmd.*.pid; do [ -e "$f" ] && stop_pid "$(cat "$f")" "$(basename "$f" .pid)"; rm -f "$f"; done
  f=$DIR/run/slurmctld.pid; [ -e "$f" ] && stop_pid "$(cat "$f")" slurmctld; rm -f "$f"
  f=$DIR/run/munged.pid; [ -e "$f" ] && stop_pid "$(cat "$f")" munged; rm -f "$f"
  if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$CONF" ]; then
    rm -f /etc/slurm/slurm.conf
  fi
  if [ -n "$NETNS" ]; then hosts_down; fi
  rm -rf "$DIR/etc" "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/nodes"
  say "down (logs kept in $DIR/log)"
}

status() {
  if healthy; then echo "healthy: $(cat "$DIR/nodes") nodes"; sl sinfo -N -o '%N %T %c'; return 0; fi
  echo "not healthy"; return 1
}

case "${1:-}" in
  install) ensure_packages ;;
  up) up ;;
  down) down ;;
  status) status ;;
  env) env_lines ;;
  login) shift; SLURM_CONF=$CONF in_login "$@" ;;
  *) echo "usage: $0 install|up|down|status|env|login CMD..." >&2; exit 2 ;;
esac
