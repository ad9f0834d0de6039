# Sourced by the scripts beside it: point Podman at a containers configuration for this kind of
# machine (var/podman/containers.conf), written here, never in the shipped Dockerfile or compose.
#   runtime runc          crun refuses hosts with hybrid cgroup v1/v2 hierarchies
#   cgroup manager        cgroupfs: no systemd to delegate to
#   default ulimits       the host's own hard limits: a container may not raise nofile/nproc
#   events/logs           files, not journald (no systemd)
# Override with CONTAINERS_CONF=path to use your own.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PODMAN_VAR="${PODMAN_VAR:-$ROOT/var/podman}"
mkdir -p "$PODMAN_VAR"
# The host's hard limits, and no more than 32768 processes: runc fails to set more here,
# though the host allows more.
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
[ "$nofile" = unlimited ] && nofile=1048576
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
if [ -z "${CONTAINERS_CONF:-}" ]; then
  CONTAINERS_CONF="$PODMAN_VAR/containers.conf"
  cat >"$CONTAINERS_CONF.tmp" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
fi
export CONTAINERS_CONF
# podman build takes its own ulimits, not the configuration's: the same limits.
BUILD_ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
