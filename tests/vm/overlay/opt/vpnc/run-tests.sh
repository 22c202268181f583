#!/bin/bash
# Runs inside the VM as vpnc-vmtest.service. stdout is /dev/ttyS1 (the results port that
# run.sh captures); the markers also go to the console (ttyS0).
#
# Runs, in name order:
#   /opt/vpnc/tests/<name>/<name>.test  Go test binaries (go test -c), cwd = their directory
#                                        (testdata/ beside them), with -test.v,
#                                        -test.parallel=3 (unless VMTEST_ARGS sets it) and
#                                        -test.run=$VMTEST_RUN, or VMTEST_RUN_<NAME> when
#                                        VMTEST_RUN is empty (e.g. VMTEST_RUN_E2E)
#   /opt/vpnc/tests/*.sh                 shell tests: pass = exit 0
# Counts top-level Go tests (--- PASS/FAIL/SKIP) and scripts, prints
#   vmtest: N passed, N failed, N skipped
# and always ends with "=== VMTEST END rc=N ===" (rc 0 only when nothing failed and
# something ran). Always exits 0: the unit's SuccessAction powers the VM off.
set -u
VMTEST_RUN=
VMTEST_TEST_TIMEOUT=420
VMTEST_ARGS=
VMTEST_PROFILE=0
VMTEST_BENCH_ARGS=
VMTEST_NOFLAP_ROUNDS=
VPNC_VM_E2E_MATRIX=0
# shellcheck disable=SC1091
[ -r /opt/vpnc/env ] && . /opt/vpnc/env
# A longer run's settings (run.sh): vpn-bench flags for shaped_test.go, the no-flap window
# of failover_loss_test.go.
export VMTEST_BENCH_ARGS VMTEST_NOFLAP_ROUNDS
export VPNC_VM_GUEST=1 VPNC_AGENT=/opt/vpnc/bin/vpn-agent VPNC_DIST=/opt/vpnc/dist
# Prebuilt binaries for the e2e harness (tests/e2e honours all three; there is no Go toolchain here).
export VPN_E2E_AGENT=/opt/vpnc/bin/vpn-agent VPN_E2E_PROVIDER=/opt/vpnc/bin/provider
export VPN_E2E_AGENT_HOOKS=/opt/vpnc/bin/testhooks/vpn-agent
# tests/e2e's leak matrix configures this backend: here, kernel WireGuard (fails if missing).
export VPNC_E2E_BACKEND=${VPNC_E2E_BACKEND:-kernel} VPNC_VM_E2E_MATRIX
export PATH=/opt/vpnc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root GOTRACEBACK=all

console() { echo "$*" >/dev/console 2>/dev/null || true; }
both() { echo "$*"; console "$*"; }

both "=== VMTEST BEGIN ==="
up=$(cut -d' ' -f1 /proc/uptime)
echo "vm: kernel $(uname -r), $(systemctl --version | head -n1), tests start ${up}s after boot"
if [ "$VMTEST_PROFILE" = 1 ]; then
	echo "vm: boot profile (journal, monotonic):"
	journalctl -b -o short-monotonic --no-pager 2>&1 |
		grep -E 'Starting|Finished|Started|Reached target|Startup' | cut -c1-140
fi
if [ -x "$VPNC_AGENT" ]; then echo "vm: vpn-agent injected"; else echo "vm: no vpn-agent injected"; fi

pass=0 fail=0 skip=0 ran=0
failed=()
shopt -s nullglob
for t in /opt/vpnc/tests/*/*.test /opt/vpnc/tests/*.sh; do
	name=${t#/opt/vpnc/tests/}
	log=/tmp/vmtest.$(basename "$t").log
	echo
	echo "### $name"
	ran=$((ran + 1))
	t0=$(date +%s)
	if [[ $t == *.test ]]; then
		args=(-test.v "-test.timeout=${VMTEST_TEST_TIMEOUT}s")
		filter=$VMTEST_RUN
		if [ -z "$filter" ]; then
			v=VMTEST_RUN_$(basename "$t" .test | tr 'a-z-' 'A-Z_')
			filter=${!v:-}
		fi
		[ -n "$filter" ] && args+=("-test.run=$filter")
		# The heavy guest tests (leak matrix states, systemd checks) are parallel and mostly
		# wait (handshakes, RestartSec=, probe timeouts): 3 at a time on the 2 vCPUs.
		[[ " $VMTEST_ARGS " == *" -test.parallel"* ]] || args+=(-test.parallel=3)
		# shellcheck disable=SC2206
		[ -n "$VMTEST_ARGS" ] && args+=($VMTEST_ARGS)
		(cd "$(dirname "$t")" && timeout -k 10 $((VMTEST_TEST_TIMEOUT + 30)) "$t" "${args[@]}") 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		p=$(grep -c '^--- PASS: ' "$log")
		f=$(grep -c '^--- FAIL: ' "$log")
		s=$(grep -c '^--- SKIP: ' "$log")
		if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
			echo "### $name: exited rc=$rc with no failing test (timeout, panic or exec failure)"
			f=1
		fi
		pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
		[ "$f" = 0 ] || failed+=("$name")
	else
		(cd /opt/vpnc/tests && timeout -k 10 "$VMTEST_TEST_TIMEOUT" bash "$t") 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		if [ "$rc" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name"); fi
	fi
	echo "### $name: rc=$rc in $(($(date +%s) - t0))s"
done

if [ "$ran" = 0 ]; then
	echo "vmtest: nothing to run: no /opt/vpnc/tests/*/*.test or /opt/vpnc/tests/*.sh injected"
	fail=$((fail + 1))
fi
if [ "$fail" != 0 ]; then
	echo
	echo "### failed: ${failed[*]}"
	echo "### systemctl --failed"
	systemctl --failed --no-pager 2>&1 | head -n 40
	echo "### journal (last 150 lines)"
	journalctl -b --no-pager -o short-monotonic -n 150 2>&1
fi
echo
summary="vmtest: $pass passed, $fail failed, $skip skipped"
both "$summary"
rc=0
[ "$fail" = 0 ] || rc=1
both "=== VMTEST END rc=$rc ==="
sync
sleep 1
exit 0
