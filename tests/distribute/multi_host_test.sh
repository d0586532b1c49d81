#!/usr/bin/env bash
# Two workers as two hosts (#15): two network namespaces joined by a veth pair, 10.77.0.1 and
# 10.77.0.2, and mpirun started in the first with a hostfile naming both; it starts the second
# host's rank through scripts/netns_launch_agent.sh (plm_rsh_agent) instead of ssh, and MPI's TCP
# transport is held to the veth's subnet. tests/distribute/multi_host_worker.cc trains on both;
#  1. both end with the chief's weights, bit for bit;
#  2. the cut link: the veth taken down mid-training makes both workers stop with the collective
#     deadline error (KILN_COLLECTIVE_TIMEOUT=3) naming the collective and the rank, on their own
#     (no hang); what OpenMPI's launchers leave behind is killed, and nothing is left running.
# The namespaces are removed afterwards, also on failure. Skipped (77) where they cannot be made
# (not root, no `ip`, no CAP_SYS_ADMIN) or without mpirun.
# Usage: multi_host_test.sh MPIRUN WORKER AGENT
set -uo pipefail
mpirun=$1 worker=$2 agent=$3
skip() {
  echo "skipped: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
[[ -n $mpirun && -x $mpirun ]] || skip "mpirun was not found when the tests were configured"
((EUID == 0)) || skip "network namespaces need root (ip netns add); running as uid $EUID"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"

# Namespaces left by an earlier run that was killed (its process is gone).
for ns in $(ip netns list 2>/dev/null | awk '/^kiln_mh[01]_/ {print $1}'); do
  if ! kill -0 "${ns##*_}" 2>/dev/null; then
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  fi
done

h0=kiln_mh0_$$ h1=kiln_mh1_$$ v0=kmh0_$$ v1=kmh1_$$
tmp=$(mktemp -d)
kill_namespace_processes() {
  for ns in $h0 $h1; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
  done
}
cleanup() {
  kill_namespace_processes
  ip netns del "$h0" 2>/dev/null
  ip netns del "$h1" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! error=$(ip netns add "$h0" 2>&1); then
  skip "cannot create a network namespace ($error): needs CAP_SYS_ADMIN"
fi
# Entering it remounts / as a slave: that fails in a chroot whose / is no mount point.
if ! error=$(ip -n "$h0" link set lo up 2>&1); then
  skip "cannot enter a network namespace ($error): a chroot without its own mount of /?"
fi
ip netns add "$h1" || fail "ip netns add $h1"
ip link add "$v0" netns "$h0" type veth peer name "$v1" netns "$h1" || fail "ip link add veth"
ip -n "$h0" addr add 10.77.0.1/24 dev "$v0" && ip -n "$h1" addr add 10.77.0.2/24 dev "$v1" &&
  ip -n "$h0" link set "$v0" up && ip -n "$h1" link set "$v1" up &&
  ip -n "$h0" link set lo up && ip -n "$h1" link set lo up || fail "configuring the veth pair"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$tmp/hosts"

# mpirun in host 0's namespace: rank 0 there, rank 1 through the agent in host 1's. As root,
# OpenMPI needs --allow-run-as-root (the OMPI_ALLOW_RUN_AS_ROOT* variables reach the remote
# orted too). Out-of-band and TCP transport on the veth subnet only.
# start_job LOG EPOCHS DIR: mpirun in the background, its pid in $job; each rank also writes
# its lines to DIR/rank<r>.log (rank 1's output cannot reach mpirun once the link is cut).
start_job() {
  ip netns exec "$h0" env KILN_NETNS_HOSTS="10.77.0.1=$h0 10.77.0.2=$h1" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$mpirun" --allow-run-as-root --hostfile "$tmp/hosts" -np 2 \
    --mca plm_rsh_agent "$agent" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    -x KILN_COLLECTIVE_TIMEOUT=3 -x KILN_TEST_EPOCHS="$2" -x KILN_TEST_LOG_DIR="$3" \
    "$worker" >"$1" 2>&1 &
  job=$!
}
# Waits (polling, up to $2 seconds, the guard against a hang) until $1's command is true.
wait_for() {
  local i
  for ((i = 0; i < $2 * 10; ++i)); do
    eval "$1" && return 0
    sleep 0.1
  done
  return 1
}
worker_exe=$(readlink -f "$worker")
workers_running() {  # in this test's namespaces (another run of the test has its own)
  local p
  for p in $(ip netns pids "$h0" 2>/dev/null) $(ip netns pids "$h1" 2>/dev/null); do
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$worker_exe" ]] && return 0
  done
  return 1
}

# 1. Training across the two hosts.
mkdir "$tmp/train" "$tmp/cut"
start_job "$tmp/train.log" 3 "$tmp/train"
wait_for "! kill -0 $job 2>/dev/null" 120 || fail "the 2-host job hung: $(cat "$tmp/train.log")"
wait "$job" || fail "the 2-host job failed: $(cat "$tmp/train.log")"
cat "$tmp/train.log"
for r in 0 1; do
  grep -q "^rank $r of 2: weights identical to the chief's" "$tmp/train.log" ||
    fail "rank $r did not end with the chief's weights"
done

# 2. The cut link: the veth taken down once rank 0 has trained 2 epochs (of 100000).
start_job "$tmp/cut.log" 100000 "$tmp/cut"
wait_for "grep -q '^rank 0 of 2: epoch 2$' $tmp/cut/rank0.log 2>/dev/null" 120 ||
  fail "training did not start: $(cat "$tmp/cut.log")"
ip netns pids "$h1" | xargs -r -I{} readlink /proc/{}/exe | grep -qx "$worker_exe" ||
  fail "no worker runs in host 1's namespace"
ip -n "$h1" link set "$v1" down
cut=$SECONDS
# The workers stop by themselves: each prints the deadline error and exits.
wait_for "! workers_running" 120 || fail "the workers hung after the cut: $(cat "$tmp/cut.log")"
stopped=$((SECONDS - cut))
sleep 1
tail -3 "$tmp/cut.log"
for r in 0 1; do
  line=$(grep -m1 "^rank $r of 2: error " "$tmp/cut/rank$r.log") || fail "rank $r printed no error"
  [[ $line == *"error deadline exceeded: "*"all_reduce step "*"within 3 s"* ||
    $line == *"error unavailable: "*"rank "* ]] ||
    fail "rank $r: not the deadline error naming the collective and a rank: $line"
done
cat "$tmp/cut/rank1.log"
grep -q "weights identical" "$tmp/cut"/rank*.log && fail "a worker finished training after the cut"
echo "both workers stopped with the deadline error ${stopped} s after the cut (deadline 3 s)"
# OpenMPI's launchers (mpirun here, the orted over the cut link) may still wait for each other.
kill_namespace_processes
wait "$job" 2>/dev/null
wait_for "[[ -z \$(ip netns pids $h0) && -z \$(ip netns pids $h1) ]]" 10 ||
  fail "processes left running in the namespaces"
echo "nothing left running"
