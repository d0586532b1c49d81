#!/usr/bin/env bash
# A launch agent for OpenMPI (mpirun --mca plm_rsh_agent scripts/netns_launch_agent.sh) that
# starts a "remote" host's processes in a Linux network namespace of this machine instead of
# over ssh: KILN_NETNS_HOSTS maps each host of the hostfile to its namespace, as
# "10.77.0.1=ns_a 10.77.0.2=ns_b". OpenMPI runs it as `agent HOST COMMAND...`, COMMAND being a
# shell command line (orted and its arguments), as it would give ssh. Needs root (ip netns exec).
# tests/distribute/multi_host_test.sh uses it to run two workers as two hosts.
set -euo pipefail
host=$1
shift
namespace=
for pair in ${KILN_NETNS_HOSTS:-}; do
  if [[ ${pair%%=*} == "$host" ]]; then namespace=${pair#*=}; fi
done
if [[ -z $namespace ]]; then
  echo "netns_launch_agent: host '$host' is not in KILN_NETNS_HOSTS ('${KILN_NETNS_HOSTS:-}')" >&2
  exit 1
fi
exec ip netns exec "$namespace" sh -c "$*"
