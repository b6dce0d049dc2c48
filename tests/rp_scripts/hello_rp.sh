#!/bin/sh
# hello_rp.sh [SECONDS]: a unit script in the style of RADICAL-Pilot 0.90's examples (written for
# this project): its start and end are trace events appended to $RP_PROF, the unit's profile
# file in RP 0.90 (a line "time,event,unit_script,MainThread,uid,AGENT_EXECUTING,", the time from
# $RP_GTOD); no RP_PROF: no events.  It says where it runs and sleeps SECONDS.
prof() {
    test -z "$RP_PROF" && return
    now=$($RP_GTOD)
    echo "$now,$1,unit_script,MainThread,$RP_UNIT_ID,AGENT_EXECUTING," >> $RP_PROF
}
prof app_start
echo "${PILOT_NODE_NAME:-$(hostname)} : $$ : ${1:-0}"
sleep "${1:-0}"
prof app_stop
