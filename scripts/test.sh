#!/usr/bin/env bash
# The project's test command (README; .ci/run calls exactly this).
# As root on Debian 12: installs missing packages, then runs static checks,
# unit tests, the end-to-end namespace suite (real WireGuard peers, real
# nftables, packet captures), short fuzz runs, the Nix checks and the
# Debian-under-qemu VM tier (kernel WireGuard + systemd).
#   VPNC_WITH_VM=0   skip the VM tier
#   VPNC_FUZZTIME=N  fuzz executions per parser (default 100000x). A count, not a
#                    duration: Go 1.26's fuzz coordinator can report a spurious
#                    "context deadline exceeded" when a duration expires under
#                    load (golang/go#75804); a count has no deadline to race.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (network namespaces, nftables, qemu)" >&2
  exit 1
fi
export PATH=/usr/local/go/bin:$PATH
scripts/deps.sh
start=$(date +%s)
step() { printf '\n== %s (t+%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

# The VM tier's images (tests/vm/build-image.sh: bookworm, trixie) build in the background
# while the checks and Go tests below run, so a clean machine does not pay for them before the
# VM tier; the tier reuses them (or, if a build failed, builds again and fails with its
# output). Log: tests/vm/out/image-build.log.
vmimg_pid=
with_vm=0
if [ "${VPNC_WITH_VM:-1}" = 1 ] && [ -x tests/vm/ci.sh ]; then
  with_vm=1
  mkdir -p tests/vm/out
  vmimg_log=tests/vm/out/image-build.log
  # Its own session, so an early failure of this script ends the build (the EXIT trap).
  setsid -w bash -c 'rc=0
    for s in ${VMTEST_SUITES:-bookworm trixie}; do
      VPNC_VM_SUITE=$s tests/vm/build-image.sh || { echo "[vm-image] $s: build FAILED (rc=$?)"; rc=1; }
    done
    exit $rc' >"$vmimg_log" 2>&1 </dev/null &
  vmimg_pid=$!
  trap '[ -z "$vmimg_pid" ] || kill -TERM -- "-$vmimg_pid" 2>/dev/null || true' EXIT
fi

step "format and vet"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt needed: $bad" >&2; exit 1; fi
go vet ./...
# The fault-injection hooks build only with their tag (tests/e2e builds it too).
go vet -tags vpnagent_testhooks ./agent/cli

step "unit and end-to-end tests"
report=$(mktemp -d)
trap 'rm -rf "$report"; [ -z "$vmimg_pid" ] || kill -TERM -- "-$vmimg_pid" 2>/dev/null || true' EXIT
VPNC_MATRIX_REPORT="$report/leak-matrix.txt" go test -count=1 -timeout 20m ./...
go test -count=1 -tags vpnagent_testhooks ./agent/cli
if [ -s "$report/leak-matrix.txt" ]; then
  step "leak matrix (tests/e2e)"
  cat "$report/leak-matrix.txt"
fi

step "per-packet kill-switch benchmark (smoke: one short round; see BENCHMARKS.md)"
go test ./policy -run '^$' -bench '^BenchmarkKillSwitchPerPacket$' -benchtime 2000x -count 1

step "fuzz the parsers"
ft=${VPNC_FUZZTIME:-100000x}
go test ./agent/wgquick -run '^$' -fuzz '^FuzzParse$' -fuzztime "$ft"
go test ./agent/config -run '^$' -fuzz '^FuzzConfig$' -fuzztime "$ft"
go test ./agent/natpmp -run '^$' -fuzz '^FuzzResponse$' -fuzztime "$ft"
go test ./agent/wireguard -run '^$' -fuzz '^FuzzParseUAPI$' -fuzztime "$ft"
go test ./agent/dnsproxy -run '^$' -fuzz '^FuzzQuery$' -fuzztime "$ft"

step "nix: parse every .nix file, check vendorHash"
.ci/nix-check.sh

if [ "$with_vm" = 1 ]; then
  step "vm tier: Debian under qemu (kernel WireGuard, systemd)"
  if wait "$vmimg_pid"; then
    grep -E '^\[vm-image\] (built|reusing)' "$vmimg_log" || true
  else
    echo "vm tier: the background image build failed; its log ($vmimg_log):"
    tail -n 40 "$vmimg_log"
  fi
  vmimg_pid=
  tests/vm/ci.sh
fi
step "all checks passed"
