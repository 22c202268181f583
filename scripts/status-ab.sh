#!/usr/bin/env bash
# A/B of `vpn-agent status` of N namespaces (issue 25 part 5, BENCHMARKS.md
# "status of 100 namespaces"): vpn-bench's scale workload brings up N agents
# and times the status of all of them by both binaries against the same
# fleet, alternating, order flipped each round (--status-bin); the runs swap
# which binary runs the agents. Prints each run's scale lines with the load.
#   scripts/status-ab.sh A-REV B-REV [RUNS] [N]   (git revisions; default 2 runs, N=100)
# e.g. scripts/status-ab.sh main fleet 4 100 | tee docs/bench/<name>.txt
# Builds into $VPNC_AB_DIR (default /tmp/status-ab). As root; the machine's
# load matters (note `uptime`): a 100-agent fleet itself uses ~0.3 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?A revision}; b=${2:?B revision}; runs=${3:-2}; n=${4:-100}
dir=${VPNC_AB_DIR:-/tmp/status-ab}
export PATH=/usr/local/go/bin:$PATH
mkdir -p "$dir"
build() { # build REV OUT
  local wt="$dir/src-$2"
  rm -rf "$wt"; git worktree prune
  git worktree add -q --detach "$wt" "$1"
  (cd "$wt" && go build -o "$dir/$2" ./agent/cmd/vpn-agent && go build -o "$dir/vpn-bench-$2" ./agent/cmd/vpn-bench)
  echo "# $2: $1 = $(git rev-parse --short "$1")"
  git worktree remove --force "$wt"
}
build "$a" vpn-agent-a
build "$b" vpn-agent-b
echo "# vpn-bench --modes tunnel+policy --workloads scale --scale $n --backend userspace --agent-bin X --status-bin Y (vpn-bench of B); $(uname -r), $(nproc) CPUs"
for i in $(seq "$runs"); do
  if [ $((i % 2)) = 1 ]; then x=vpn-agent-a y=vpn-agent-b; else x=vpn-agent-b y=vpn-agent-a; fi
  echo "== run $i: agent-bin $x, status-bin $y; $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$dir/vpn-bench-vpn-agent-b" --modes tunnel+policy --workloads scale --scale "$n" --backend userspace \
    --agent-bin "$dir/$x" --status-bin "$dir/$y" --out "$dir/run$i.json" 2>"$dir/run$i.log" |
    grep -E '^\s+(up \(|handshakes|status|1-minute)|scale-status' || { echo "run $i failed: see $dir/run$i.log"; tail -5 "$dir/run$i.log"; }
done
echo "== done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
