#!/usr/bin/env bash
# The VM tier as CI runs it (.ci/run calls this): build or reuse the cached Debian image,
# build the agent and the guest test binaries, boot the VM under qemu TCG, run the tests
# under systemd, print the results and a closing summary line
#   vm-tier: N passed, N failed, N skipped
# Exits with the guest's result (0 only when every guest test passed).
# Environment: see build-image.sh and run.sh (VMTEST_TIMEOUT, VMTEST_PKGS, ...).
set -uo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export VMTEST_LOGDIR=${VMTEST_LOGDIR:-$SCRIPT_DIR/out}
mkdir -p "$VMTEST_LOGDIR"
rm -f "$VMTEST_LOGDIR/summary"

T0=$(date +%s)
if ! IMG=$("$SCRIPT_DIR/build-image.sh" --print-dir); then
	echo "vm-tier: the VM image could not be built (see [vm-image] above)"
	echo "vm-tier: 0 passed, 1 failed"
	exit 1
fi
T1=$(date +%s)
"$SCRIPT_DIR/run.sh" --image-dir "$IMG"
rc=$?
T2=$(date +%s)

summary=$(sed -n 's/^vmtest: \([0-9]* passed, [0-9]* failed.*\)$/\1/p' "$VMTEST_LOGDIR/summary" 2>/dev/null)
[ -n "$summary" ] || summary="0 passed, 1 failed"
if [ "$rc" != 0 ] && [[ $summary == *" 0 failed"* ]]; then
	summary="${summary/ 0 failed/ 1 failed}"
fi
echo "vm-tier: image $((T1 - T0)) s ($(basename "$IMG")), build + boot + tests $((T2 - T1)) s, total $((T2 - T0)) s; logs in $VMTEST_LOGDIR"
echo "vm-tier: $summary"
exit "$rc"
