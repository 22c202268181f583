#!/bin/bash
# vpn-bench's failover workload on kernel WireGuard in the VM guest (issue 25, "Measured, not
# assumed"): not part of CI. Injected with
#   VMTEST_EXTRA=tests/vm/extra/failover-bench VMTEST_BENCH_ARGS='--failover-samples 5 ...' tests/vm/ci.sh
# run-tests.sh runs it after the Go test binaries (pass = exit 0). It runs
#   vpn-bench --backend kernel --modes tunnel --workloads failover \
#     --failover-scenarios stream-probe,stream-fast --failover-stream-probe 5s --failover-standby ab
# plus $VMTEST_BENCH_ARGS (later flags win; e.g. --failover-samples N), once as it is and once
# with --failover-shaping loss1pct, and prints vpn-bench's progress and summaries as they are.
set -u
out=$(mktemp -d)
args=(--backend kernel --modes tunnel --workloads failover
	--failover-scenarios stream-probe,stream-fast --failover-stream-probe 5s --failover-standby ab
	--log-level warn --out "$out/benchmark.json")
# shellcheck disable=SC2206
args+=(${VMTEST_BENCH_ARGS:-})
# Once on the clean path, once under loss1pct (netem on the pool's uplink, both ends).
rc=0
for shaping in "" loss1pct; do
	a=("${args[@]}")
	[ -z "$shaping" ] || a+=(--failover-shaping "$shaping")
	echo "guest load: $(cat /proc/loadavg)"
	echo "vpn-bench ${a[*]}"
	t0=$(date +%s)
	/opt/vpnc/bin/vpn-bench "${a[@]}" 2>&1 || rc=1
	echo "vpn-bench: exit after $(($(date +%s) - t0)) s (rc so far $rc); guest load: $(cat /proc/loadavg)"
done
exit "$rc"
