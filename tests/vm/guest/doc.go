// Package guest holds the tests that run inside the Debian VM of the VM tier
// (tests/vm/run.sh): a real kernel with wireguard.ko and systemd as PID 1, which the
// namespace suite on the host cannot give.
//
// run.sh compiles every package under tests/vm/ that has tests with `go test -c`, injects
// the binaries into the VM at /opt/vpnc/tests/<name>/<name>.test and runs them there with
// VPNC_VM_GUEST=1. Outside the VM every test here skips.
//
// In the guest: vpn-agent (when agent/cmd/vpn-agent builds) is at /opt/vpnc/bin/vpn-agent
// (also /usr/bin and /usr/local/bin), dist/systemd is at /opt/vpnc/dist/systemd with its
// units installed in /etc/systemd/system, and /opt/vpnc/bin/vpnc-enable-resolved turns
// on systemd-resolved the way a Debian host with it enabled looks (nscd: `systemctl start
// nscd`). See docs/vm-tier.md.
package guest
