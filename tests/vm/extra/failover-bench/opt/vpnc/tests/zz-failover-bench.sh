#!/bin/bash
# vpn-bench's failover workload on kernel WireGuard in the VM guest (issue 25, "Measured, not
# assumed"): not part of CI. Injected with
#   VMTEST_EXTRA=tests/vm/extra/failover-bench VMTEST_BENCH_ARGS='--failover-samples 5 ...' tests/vm/ci.sh
# run-tests.sh runs it after the Go test binaries (pass = exit 0). It runs
#   vpn-bench --backend kernel --modes tunnel --workloads failover \
#     --failover-scenarios stream-probe,stream-fast --failover-stream-probe 5s --failover-standby ab
# plus $VMTEST_BENCH_ARGS (later flags win; e.g. --failover-samples N, --failover-shaping loss1pct),
# and prints vpn-bench's progress and summary as they are.
set -u
out=$(mktemp -d)
args=(--backend kernel --modes tunnel --workloads failover
	--failover-scenarios stream-probe,stream-fast --failover-stream-probe 5s --failover-standby ab
	--log-level warn --out "$out/benchmark.json")
# shellcheck disable=SC2206
args+=(${VMTEST_BENCH_ARGS:-})
echo "guest load: $(cat /proc/loadavg)"
echo "vpn-bench ${args[*]}"
t0=$(date +%s)
/opt/vpnc/bin/vpn-bench "${args[@]}" 2>&1
rc=$?
echo "vpn-bench: exit $rc after $(($(date +%s) - t0)) s; guest load: $(cat /proc/loadavg)"
exit "$rc"
