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
# On a clean machine apt takes minutes and Go's build cache is cold (vet and the test
# binaries: ~90 s of compiling): fill the cache meanwhile. Compile only (-exec true: no test
# runs, none needs the packages yet); its errors show again in the steps below.
( go vet ./... && go test -count=1 -run '^$' -exec true ./... ) >/dev/null 2>&1 &
warm_pid=$!
scripts/deps.sh
wait "$warm_pid" || true
start=$(date +%s)
step() { printf '\n== %s (t+%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

# The VM tier (tests/vm/ci.sh: Debian under qemu, kernel WireGuard, systemd). Its images
# (build-image.sh: bookworm, trixie; built on a clean machine, reused after) build in the
# background, and its Debian 13 pass (trixie: the systemd checks and the leak matrix's warm-standby states, mostly waiting) then runs
# there beside the end-to-end tests (not the unit tests); the Debian 12 pass (bookworm: the kernel backend's leak matrices,
# which need the CPU) runs after them. The background's output goes to
# tests/vm/out/vm-background.log, printed and judged at the end. An early failure of this
# script ends it (the EXIT trap).
vm_pid=
with_vm=0
if [ "${VPNC_WITH_VM:-1}" = 1 ] && [ -x tests/vm/ci.sh ]; then
  with_vm=1
  mkdir -p tests/vm/out
  rm -f tests/vm/out/.unit-done
  vm_log=tests/vm/out/vm-background.log
  # Its own session, so the trap can end the whole group (qemu included).
  setsid -w bash -c 'started=$(date +%s)
    for s in ${VMTEST_SUITES:-bookworm trixie}; do
      VPNC_VM_SUITE=$s tests/vm/build-image.sh ||
        { echo "[vm-image] $s: build FAILED"; exit 1; }
    done
    echo "[vm-image] images ready after $(( $(date +%s) - started ))s"
    # The Debian 13 pass waits for the unit tests (timing-sensitive ones flaked beside it).
    while [ ! -e tests/vm/out/.unit-done ]; do sleep 2; done
    case " ${VMTEST_SUITES:-bookworm trixie} " in
    *" trixie "*) VMTEST_SUITES=trixie tests/vm/ci.sh ;;
    esac' >"$vm_log" 2>&1 </dev/null &
  vm_pid=$!
  trap '[ -z "$vm_pid" ] || kill -TERM -- "-$vm_pid" 2>/dev/null || true' EXIT
fi

step "format and vet"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt needed: $bad" >&2; exit 1; fi
go vet ./...
# The fault-injection hooks build only with their tag (tests/e2e builds it too).
go vet -tags vpnagent_testhooks ./agent/cli

step "unit tests"
report=$(mktemp -d)
trap 'rm -rf "$report"; [ -z "$vm_pid" ] || kill -TERM -- "-$vm_pid" 2>/dev/null || true' EXIT
go test -count=1 -timeout 20m $(go list ./... | grep -v '/tests/e2e$')
go test -count=1 -tags vpnagent_testhooks ./agent/cli
# The VM tier's background pass may start now (see above).
[ "$with_vm" = 1 ] && touch tests/vm/out/.unit-done

step "end-to-end tests (tests/e2e)"
# As JSON through tests/cmd/testreport: the plain output (failures in full), then the slowest
# tests, so that the log shows where the suite's minutes go. Four tests at a time, not go
# test's default of GOMAXPROCS (2): three of them mostly wait on timers (the leak matrix's
# warm-standby site ~280 s, TestIdleFailoverDefaultProbe ~250 s, TestStatusIdleFirstMinutes
# ~190 s), and with two slots two of them held both while the CPU stood 95 % idle for minutes.
go build -o "$report/testreport" ./tests/cmd/testreport
VPNC_MATRIX_REPORT="$report/leak-matrix.txt" go test -json -count=1 -parallel 4 -timeout 20m ./tests/e2e |
  "$report/testreport" -slowest 15
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
  vm_rc=0
  wait "$vm_pid" || vm_rc=$?
  vm_pid=
  echo "-- in the background: images, and the Debian 13 pass ($vm_log)"
  cat "$vm_log"
  if [ "$vm_rc" != 0 ]; then
    echo "vm tier: the background part FAILED (exit $vm_rc)" >&2
    exit "$vm_rc"
  fi
  case " ${VMTEST_SUITES:-bookworm trixie} " in
  *" bookworm "*)
    echo "-- the Debian 12 pass"
    VMTEST_SUITES=bookworm tests/vm/ci.sh ;;
  esac
fi
step "all checks passed"
