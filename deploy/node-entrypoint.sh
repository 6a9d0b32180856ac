#!/bin/sh
# The node agent's entrypoint in its DaemonSet pod (deploy/kubernetes/node.yaml): leave the pod's
# cgroups, then run `locale2b node` with the DaemonSet's arguments.
#
# Why: sandboxes must outlive the agent's pod, as they outlive a `serve` restarted by systemd
# (KillMode=process). The process runtime's sandboxes are host processes (hostPID: the pod shares the
# host's pid namespace, so they are not killed with a pid namespace of the pod's) in cgroups nested
# under the agent's own group. In the pod's group they would die with it: when the container stops,
# containerd's runc shim kills every process in the container's cgroup (`runc kill --all`, done for
# containers in the host's pid namespace), and the kubelet kills whatever is left in a deleted pod's
# cgroup. So the agent first moves itself into a group of its own at the top of each hierarchy
# ($LOCALE2B_NODE_CGROUP, default locale2b-node): the container's init is still this process (stopped
# by its pid), the pod's groups are left empty, and a restarted agent adopts the sandboxes.
# The cost: the pod's resources.limits do not apply to the agent and its sandboxes (--max-sandboxes
# and --memory-budget-mb do), as for `serve` under systemd.
set -eu
group=${LOCALE2B_NODE_CGROUP:-locale2b-node}
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  # cgroup v2: one tree. The pod may have a cgroup namespace of its own, out of which no process may be
  # moved: the move is made from the host's (pid 1's; hostPID), and the agent runs in it.
  exec nsenter --target 1 --cgroup -- sh -c '
    mkdir -p "/sys/fs/cgroup/$1" && echo $$ >"/sys/fs/cgroup/$1/cgroup.procs"
    shift; exec node /opt/locale2b/dist/control-plane/cli/main.js node "$@"' sh "$group" "$@"
fi
# cgroup v1: one hierarchy per controller (and name=systemd, and a hybrid host's unified tree).
for h in /sys/fs/cgroup/*/; do
  [ -f "${h}cgroup.procs" ] || continue
  dir=${h}${group}
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    # A new cpuset group has no CPUs or memory nodes: nothing can join it until they are copied in.
    if [ -f "$dir/cpuset.cpus" ]; then
      cat "$(dirname "$dir")/cpuset.cpus" >"$dir/cpuset.cpus"
      cat "$(dirname "$dir")/cpuset.mems" >"$dir/cpuset.mems"
    fi
  fi
  echo $$ >"$dir/cgroup.procs"
done
exec node /opt/locale2b/dist/control-plane/cli/main.js node "$@"
