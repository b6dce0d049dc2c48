#!/bin/sh
# radical-pilot-hello.sh [SECONDS [WORLD]]: the test executable RADICAL-Pilot's examples and
# tutorials run (`td.executable = 'radical-pilot-hello.sh'`), written for this project: it
# reports where it runs (process, node, the cores and GPUs it may use, its MPI rank and
# threads), then sleeps SECONDS; with WORLD it says `hello WORLD` instead of the report.  Its
# start and end are trace events when the pilot gives RP_PROF: RP 1.x's command
# (`$RP_PROF app_start`), or RP 0.90's profile file (a ComputeUnit's), appended to.
prof() {
  if [ -z "${RP_PROF:-}" ]; then
    return 0
  elif [ -x "$RP_PROF" ] && [ ! -d "$RP_PROF" ]; then
    "$RP_PROF" "$1"
  else
    printf '%s,%s,unit_script,MainThread,%s,AGENT_EXECUTING,\n' \
      "$(${RP_GTOD:-date +%s.%N})" "$1" "${RP_UNIT_ID:-}" >>"$RP_PROF"
  fi
}
prof app_start
sleep_s=${1:-0}
rank=${PMIX_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-${RP_RANK:-0}}}}}
threads=${OMP_NUM_THREADS:-1}
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status 2>/dev/null)
gpus=${CUDA_VISIBLE_DEVICES:-${ROCR_VISIBLE_DEVICES:-${GPU_DEVICE_ORDINAL:-}}}
if [ -n "$2" ]; then
  echo "hello $2"
else
  echo "$rank : PID     : $$"
  echo "$rank : NODE    : ${PILOT_NODE_NAME:-$(hostname)}"
  echo "$rank : CPUS    : $cpus"
  echo "$rank : GPUS    : $gpus"
  echo "$rank : RANK    : $rank"
  echo "$rank : THREADS : $threads"
  echo "$rank : SLEEP   : $sleep_s"
fi
sleep "$sleep_s"
prof app_stop
