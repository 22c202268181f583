package guest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// The systemd semantics of the confinement, with the shipped vpn-agent@.service running in
// the VM's real root namespace (no drop-in on the agent) on the kernel backend. The VM's
// "uplink" is a veth from the root namespace to a namespace playing the internet:
//
//	root ns: vmup0 100.64.0.1/24, default route via 100.64.0.2; /etc/resolv.conf: 192.0.2.53 (the image's)
//	   |
//	vmnet ns: vmnet0 100.64.0.2/24 (WireGuard endpoint :51820, kernel link wgp 10.77.0.1/24)
//	          lo 192.0.2.53: the host's resolver, a logging decoy
//	          10.77.0.1: DNS + TCP/UDP echo, reached only through the tunnel
//
// Anything on vmup0 other than WireGuard between 100.64.0.1 and 100.64.0.2:51820 (and link
// noise) while a confined service works is a leak.

var (
	sdUplinkHost = netip.MustParseAddr("100.64.0.1")
	sdEndpoint   = netip.MustParseAddr("100.64.0.2")
	sdResolver   = netip.MustParseAddr("192.0.2.53") // the image's /etc/resolv.conf
	sdDecoyAns   = netip.MustParseAddr("192.0.2.66") // what the decoy resolver answers
	sdTunSrv     = netip.MustParseAddr("10.77.0.1")
	sdTunCli     = netip.MustParseAddr("10.77.0.2")
)

const (
	sdUplinkIf = "vmup0"
	sdNet      = "vmnet"  // the "internet" namespace
	sdRoot     = "vmroot" // /run/netns name for the root namespace (ip netns attach), for captures
)

type sdFixture struct {
	t            *testing.T
	id           string
	name         string // namespace
	agent        string // vpn-agent@NAME.service
	dir          string // /run/vmtest-NAME: scripts and outputs
	tunnel       *harness.Process
	resolver     *harness.Process // the host resolver decoy
	resolverHeld bool             // hostResolvers is locked by this fixture
	pre          string           // confined long-running service that records what it saw at start
	loop         string           // confined service running a TCP echo loop through the tunnel
}

// names the decoy and the tunnel's resolver know: <what>.<id>.vmtest
func (f *sdFixture) qname(what string) string { return what + "." + f.id + ".vmtest" }

func newSDFixture(t *testing.T) *sdFixture {
	t.Helper()
	requireHarness(t)
	requireAgentUnit(t)
	if out := run(t, "ip", "route", "show", "default"); strings.TrimSpace(out) != "" {
		t.Fatalf("the VM's root namespace already has a default route:\n%s", out)
	}
	id := randID(t)
	f := &sdFixture{t: t, id: id, name: "vms" + id, dir: "/run/vmtest-vms" + id}
	f.agent = names.AgentUnit(f.name)
	f.pre = "vmtest-pre-" + f.name + ".service"
	f.loop = "vmtest-loop-" + f.name + ".service"
	t.Cleanup(f.cleanup)
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}

	// Uplink and the "internet".
	_, _ = runErr("ip", "netns", "del", sdNet)
	_, _ = runErr("ip", "link", "del", sdUplinkIf)
	run(t, "ip", "netns", "add", sdNet)
	_, _ = runErr("ip", "netns", "del", sdRoot)
	run(t, "ip", "netns", "attach", sdRoot, "1")
	run(t, "ip", "link", "add", sdUplinkIf, "type", "veth", "peer", "name", "vmnet0", "netns", sdNet)
	run(t, "ip", "addr", "add", sdUplinkHost.String()+"/24", "dev", sdUplinkIf)
	run(t, "ip", "link", "set", sdUplinkIf, "up")
	run(t, "ip", "route", "add", "default", "via", sdEndpoint.String(), "dev", sdUplinkIf)
	runIn(t, sdNet, "ip", "link", "set", "lo", "up")
	runIn(t, sdNet, "ip", "addr", "add", sdEndpoint.String()+"/24", "dev", "vmnet0")
	runIn(t, sdNet, "ip", "link", "set", "vmnet0", "up")
	runIn(t, sdNet, "ip", "addr", "add", sdResolver.String()+"/32", "dev", "lo")

	// Kernel WireGuard provider in vmnet.
	provKey, provPub := wgKeys(t)
	cliKey, cliPub := wgKeys(t)
	runIn(t, sdNet, "ip", "link", "add", "wgp", "type", "wireguard")
	runIn(t, sdNet, "wg", "set", "wgp", "listen-port", "51820", "private-key", provKey,
		"peer", cliPub, "allowed-ips", sdTunCli.String()+"/32")
	runIn(t, sdNet, "ip", "addr", "add", sdTunSrv.String()+"/24", "dev", "wgp")
	runIn(t, sdNet, "ip", "link", "set", "wgp", "up")

	// Servers: the tunnel's resolver and echo; the host's resolver (decoy).
	tunZone := map[string][]string{}
	decoyZone := map[string][]string{}
	for _, w := range []string{
		"nscd", "nscd-ns", "nscd-ctl", "nscd-exec", "nscd-exec-fix",
		"resolved", "resolved-ns", "resolved-ctl", "resolved-fix",
		"resolved-exec", "resolved-exec-fix", "resolved-exec-nss", "resolved-exec-nss-fix",
	} {
		tunZone[f.qname(w)] = []string{sdTunSrv.String()}
		decoyZone[f.qname(w)] = []string{sdDecoyAns.String()}
	}
	f.tunnel = f.startProc("tunnel", &provider.Config{
		DNS: []string{sdTunSrv.String() + ":53"}, Zone: tunZone,
		TCPEcho: []string{sdTunSrv.String() + ":7"}, UDPEcho: []string{sdTunSrv.String() + ":7"},
	})
	f.resolver = f.startProc("resolver", &provider.Config{DNS: []string{sdResolver.String() + ":53"}, Zone: decoyZone})

	// The agent's config, as an administrator would write it.
	key := harness.ReadFile(t, cliKey)
	if err := os.MkdirAll("/etc/vpn-confinement", 0o755); err != nil {
		t.Fatal(err)
	}
	keyPath := "/etc/vpn-confinement/" + f.name + ".key"
	if err := os.WriteFile(keyPath, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{
  "name": %q,
  "wireguard": {
    "privateKeyFile": %q,
    "addresses": ["%s/32"],
    "peers": [{ "publicKey": %q, "endpoint": "%s:51820", "allowedIPs": ["0.0.0.0/0"], "persistentKeepalive": 15 }]
  },
  "dns": { "servers": [%q] }
}
`, f.name, keyPath, sdTunCli, provPub, sdEndpoint, sdTunSrv.String())
	writeFile(t, "/etc/vpn-confinement/"+f.name+".json", cfg)
	if out, err := runErr(agentBin, "validate", "--config", "/etc/vpn-confinement/"+f.name+".json"); err != nil {
		t.Fatalf("vpn-agent validate: %v\n%s", err, out)
	}

	// Units. Every confined one gets the drop-in `vpn-agent unit NAME` prints, unchanged.
	dropIn := run(t, agentBin, "unit", f.name)
	unit := func(name, body string, confined bool) {
		writeFile(t, "/run/systemd/system/"+name, body)
		if confined {
			writeFile(t, "/run/systemd/system/"+name+".d/vpn-confinement.conf", dropIn)
		}
	}
	writeFile(t, f.dir+"/pre.sh", `exec >`+f.dir+`/pre.out 2>&1
echo "start $(cut -d' ' -f1 /proc/uptime)"
echo "links $(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); printf "%s ", $2 }')"
if ip link show vc-`+f.name+` >/dev/null 2>&1; then echo "tunnel present"; else echo "tunnel missing"; fi
if nft list table inet vpn-confinement >/dev/null 2>&1; then echo "killswitch loaded"; else echo "killswitch missing"; fi
sed 's/^/resolv /' /etc/resolv.conf
sed 's/^/nss /' /etc/nsswitch.conf
`)
	unit(f.pre, "[Service]\nExecStartPre=/bin/bash "+f.dir+"/pre.sh\nExecStart=/bin/sleep infinity\n", true)
	writeFile(t, f.dir+"/loop.sh", `while :; do
	r=$(echo ping | timeout 2 nc -N `+sdTunSrv.String()+` 7 2>/dev/null)
	[ "$r" = ping ] || r=FAIL
	echo "$(cut -d' ' -f1 /proc/uptime) $INVOCATION_ID $r" >>`+f.dir+`/loop.log
	sleep 0.2
done
`)
	unit(f.loop, "[Service]\nExecStart=/bin/bash "+f.dir+"/loop.sh\n", true)
	writeFile(t, f.dir+"/getent.sh", `getent hosts "$1" >`+f.dir+`/getent-$2-$1.out 2>&1
echo "rc=$?" >>`+f.dir+`/getent-$2-$1.out
{
	echo "/etc/resolv.conf: $(ls -l /etc/resolv.conf 2>&1) -> $(readlink -f /etc/resolv.conf)"
	sed 's/^/  /' /etc/resolv.conf 2>&1
	echo "/run/systemd/resolve: $(ls -A /run/systemd/resolve 2>&1 | tr '\n' ' ')"
	echo "nsswitch: $(grep '^hosts:' /etc/nsswitch.conf)"
	echo "/run/nscd: $(ls -A /run/nscd 2>&1 | tr '\n' ' ')"
	# The host resolvers' IPC, tried directly: nscd, resolved's varlink (nss-resolve), D-Bus.
	for s in /run/nscd/socket /run/systemd/resolve/io.systemd.Resolve /run/dbus/system_bus_socket; do
		if timeout 5 socat -u OPEN:/dev/null UNIX-CONNECT:$s 2>/dev/null; then echo "ipc $s reachable"; else echo "ipc $s blocked"; fi
	done
	timeout 10 getent -s hosts:resolve hosts "$1" >/dev/null 2>&1
	echo "nss-resolve rc=$?"
} >`+f.dir+`/getent-$2-$1.diag 2>&1
exit 0
`)
	getent := func(kind, extra string) {
		unit("vmtest-"+kind+"-"+f.name+"@.service",
			"[Service]\nType=oneshot\nExecStart=/bin/bash "+f.dir+"/getent.sh %i "+kind+"\n"+extra, kind == "confined")
	}
	getent("confined", "")
	// Reference variant: the drop-in with only resolved's sockets inaccessible, not
	// /run/systemd/resolve, where the resolv.conf bind mount lands when /etc/resolv.conf is a
	// symlink into it (the fix of db9591e; identical to the shipped drop-in since, and a
	// working baseline should the shipped one regress: see dns-resolved-no-leak).
	getent("fixed", "")
	fixed := strings.Replace(dropIn, " -/run/systemd/resolve ",
		" -/run/systemd/resolve/io.systemd.Resolve -/run/systemd/resolve/io.systemd.Resolve.Monitor ", 1)
	writeFile(t, "/run/systemd/system/vmtest-fixed-"+f.name+"@.service.d/vpn-confinement.conf", fixed)
	// The threat the drop-in closes: a service only put into the namespace (no resolver
	// files, no IPC restrictions) still resolves through the host's nscd/resolved.
	getent("nsonly", "NetworkNamespacePath=/run/netns/"+f.name+"\n")
	getent("plain", "") // unconfined: the positive control
	run(t, "systemctl", "daemon-reload")
	return f
}

func (f *sdFixture) startProc(name string, cfg *provider.Config) *harness.Process {
	f.t.Helper()
	cfg.Log = filepath.Join(f.dir, name+".log")
	path := filepath.Join(f.dir, name+".json")
	if err := provider.WriteConfig(path, cfg); err != nil {
		f.t.Fatal(err)
	}
	p := &harness.Process{Name: name, NS: sdNet, Bin: providerBin, Config: path, Log: cfg.Log}
	if err := p.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { p.Kill() })
	return p
}

// startInNetns starts cmd in f's namespace, killed when the test binary dies (Pdeathsig);
// stop and wait for it as usual. testbed.Start holds the forking thread until cmd exits:
// with a plain Start, Pdeathsig killed it whenever Go ended that thread (CI saw it once).
func (f *sdFixture) startInNetns(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(f.name, cmd); err != nil {
		t.Fatal(err)
	}
}

func (f *sdFixture) cleanup() {
	defer f.hostResolver(f.t, "")
	units := []string{f.pre, f.loop, f.agent}
	out, _ := runErr("systemctl", "list-units", "--all", "--plain", "--no-legend", "vmtest-*-"+f.name+"*")
	for _, l := range strings.Split(out, "\n") {
		if fl := strings.Fields(l); len(fl) > 0 {
			units = append(units, fl[0])
		}
	}
	_, _ = runErr("systemctl", append([]string{"stop"}, units...)...)
	_, _ = runErr(agentBin, "down", f.name)
	_, _ = runErr("systemctl", "stop", "nscd.service")
	_, _ = runErr("/opt/vpnc/bin/vpnc-enable-resolved", "--undo")
	os.RemoveAll("/run/systemd/resolved.conf.d/vmtest.conf")
	matches, _ := filepath.Glob("/run/systemd/system/*" + f.name + "*")
	for _, m := range matches {
		os.RemoveAll(m)
	}
	_, _ = runErr("systemctl", "daemon-reload")
	_, _ = runErr("systemctl", "reset-failed")
	os.Remove("/etc/vpn-confinement/" + f.name + ".json")
	os.Remove("/etc/vpn-confinement/" + f.name + ".key")
	_, _ = runErr("ip", "link", "del", sdUplinkIf)
	_, _ = runErr("ip", "netns", "del", sdNet)
	_, _ = runErr("ip", "netns", "del", sdRoot)
	os.RemoveAll(f.dir)
}

// prop returns one systemd unit property.
func prop(t *testing.T, unit, p string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "systemctl", "show", "-p", p, "--value", unit))
}

func propInt(t *testing.T, unit, p string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(prop(t, unit, p), 10, 64)
	if err != nil {
		t.Fatalf("%s %s: %v", unit, p, err)
	}
	return v
}

func active(unit string) string {
	out, _ := runErr("systemctl", "is-active", unit)
	return strings.TrimSpace(out)
}

// waitFor polls cond every 100 ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *sdFixture) startUnit(t *testing.T, unit string) {
	t.Helper()
	if out, err := runErr("systemctl", "start", unit); err != nil {
		t.Fatalf("systemctl start %s: %v\n%s\n%s\n%s", unit, err, out, unitDiag(unit), unitDiag(f.agent))
	}
}

// uplinkCapture captures on the VM's uplink (root namespace side).
func (f *sdFixture) uplinkCapture(t *testing.T) *observe.Observer {
	return observe.Start(t, sdRoot, sdUplinkIf, nil)
}

// wg matches the tunnel's UDP between the VM and the endpoint.
var sdWG = observe.UDP(netip.AddrPortFrom(sdUplinkHost, 0), netip.AddrPortFrom(sdEndpoint, 51820))

// sdWGBounce matches the host's port-unreachable errors to the endpoint about its WireGuard
// datagrams (one arriving for the socket of the agent that just restarted: its old link is
// gone), and the endpoint's about the host's: replies to WireGuard, as harness.WGBounceEitherWay
// on the e2e topology. The trixie pass once saw three across restart-no-leak.
func sdWGBounce(p observe.Packet) bool {
	qsrc, qdst, ok := observe.QuotedUDP(p)
	wg := netip.AddrPortFrom(sdEndpoint, 51820)
	return ok && (p.Src == sdUplinkHost && p.Dst == sdEndpoint && qsrc == wg && qdst.Addr() == sdUplinkHost ||
		p.Src == sdEndpoint && p.Dst == sdUplinkHost && qdst == wg && qsrc.Addr() == sdUplinkHost)
}

// stopUplink ends a capture after a positive control and returns the packets that are not
// WireGuard, link noise or the control: leaks.
func (f *sdFixture) stopUplink(t *testing.T, obs *observe.Observer) (leaks, all []observe.Packet) {
	t.Helper()
	ctl := harness.Control(t, obs, sdRoot, netip.AddrPortFrom(sdEndpoint, testbed.ControlPort))
	all = obs.Stop()
	return harness.Unexpected(all, observe.LinkNoise, sdWG, sdWGBounce, observe.Payload(ctl)), all
}

// getent runs `getent hosts <what>.<id>.vmtest` in the service kind ("confined", "fixed",
// "nsonly", "plain") and returns what it printed and the service's view of the resolver
// files and the host resolvers' IPC.
func (f *sdFixture) getent(t *testing.T, kind, what string) (string, string) {
	t.Helper()
	q := f.qname(what)
	f.startUnit(t, "vmtest-"+kind+"-"+f.name+"@"+q+".service")
	b := harness.ReadFile(t, f.dir+"/getent-"+kind+"-"+q+".out")
	diag, _ := os.ReadFile(f.dir + "/getent-" + kind + "-" + q + ".diag")
	t.Logf("%s service, getent hosts %s:\n%s\n%s", kind, q, b, diag)
	return strings.TrimSpace(b), string(diag)
}

// ipc parses the diag's "ipc PATH reachable|blocked" lines and "nss-resolve rc=N".
func ipc(diag string) (reach map[string]bool, nssResolveRC string) {
	reach = map[string]bool{}
	for _, l := range strings.Split(diag, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "ipc" {
			reach[f[1]] = f[2] == "reachable"
		} else if rc, ok := strings.CutPrefix(l, "nss-resolve rc="); ok {
			nssResolveRC = rc
		}
	}
	return reach, nssResolveRC
}

const (
	nscdSock     = "/run/nscd/socket"
	resolvedSock = "/run/systemd/resolve/io.systemd.Resolve"
	dbusSock     = "/run/dbus/system_bus_socket"
)

// resolverHits returns the decoy's DNS events for name since mark.
func resolverHits(t *testing.T, p *harness.Process, mark int, name string) []provider.Event {
	t.Helper()
	var out []provider.Event
	for _, e := range harness.Hits(t, p, mark) {
		if e.Kind == provider.EvDNS && strings.TrimSuffix(e.Name, ".") == name {
			out = append(out, e)
		}
	}
	return out
}

// loopLines returns the traffic loop's log lines as (uptime, invocation, result).
func (f *sdFixture) loopLines() [][3]string {
	b, _ := os.ReadFile(f.dir + "/loop.log")
	var out [][3]string
	for _, l := range strings.Split(string(b), "\n") {
		if fl := strings.Fields(l); len(fl) == 3 {
			out = append(out, [3]string{fl[0], fl[1], fl[2]})
		}
	}
	return out
}

// loopOK waits until the loop logged n successful echoes from invocation inv.
// backAfterReady checks a confined service that came back (invocation inv,
// "restarted" or "upheld"): its traffic gets through the tunnel again, and
// it started only after the agent's READY=1.
func (f *sdFixture) backAfterReady(t *testing.T, inv, how string) {
	t.Helper()
	if !f.loopOK(inv, 3, 15*time.Second) {
		t.Errorf("the %s service's traffic does not get through:\n%v", how, f.loopLines())
	}
	ready := propInt(t, f.agent, "ActiveEnterTimestampMonotonic")
	if s := propInt(t, f.loop, "InactiveExitTimestampMonotonic"); s < ready {
		t.Errorf("the %s service started (%d µs) before the agent's READY=1 (%d µs)", how, s, ready)
	}
}

func (f *sdFixture) loopOK(inv string, n int, d time.Duration) bool {
	return waitFor(d, func() bool {
		c := 0
		for _, l := range f.loopLines() {
			if l[1] == inv && l[2] == "ping" {
				c++
			}
		}
		return c >= n
	})
}

// check runs one named systemd check as a subtest and reports it for the tier summary.
func check(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	summarized(t, "systemd-check", name, fn)
}

// summarized runs fn as subtest name and reports "<kind> <name> ok|FAIL"
// for the tier summary.
func summarized(t *testing.T, kind, name string, fn func(t *testing.T)) {
	t.Helper()
	ran, skipped := false, false
	ok := t.Run(name, func(t *testing.T) {
		ran = true
		defer func() { skipped = t.Skipped() }()
		fn(t)
	})
	switch {
	case !ran || skipped: // filtered out by -test.run, or skipped: not a check that ran
	case ok:
		vmsummary("%s %s ok", kind, name)
	default:
		vmsummary("%s %s FAIL", kind, name)
	}
}

// TestSystemdConfinement: the shipped vpn-agent@.service (kernel backend, root namespace)
// and services confined with `vpn-agent unit NAME`'s drop-in, under systemd 252.
func TestSystemdConfinement(t *testing.T) {
	requireHarness(t)
	requireAgentUnit(t)
	t.Parallel()
	f := newSDFixture(t)
	nsFiles := func(t *testing.T, file string) []string {
		b, err := os.ReadFile("/etc/netns/" + f.name + "/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	}
	var preOut string

	// Semantic 2: starting only the confined service pulls in the agent (BindsTo) and runs
	// after its READY=1 (After=, Type=notify): its first command already sees the tunnel
	// and the kill switch.
	check(t, "starts-after-ready", func(t *testing.T) {
		if a := active(f.agent); a == "active" {
			t.Fatalf("precondition: %s already active", f.agent)
		}
		f.startUnit(t, f.pre)
		if a := active(f.agent); a != "active" {
			t.Fatalf("%s is %q after starting %s (BindsTo= should pull it in)", f.agent, a, f.pre)
		}
		b, err := os.ReadFile(f.dir + "/pre.out")
		if err != nil {
			t.Fatal(err)
		}
		preOut = string(b)
		t.Logf("ExecStartPre of the confined service saw:\n%s", preOut)
		for _, w := range []string{"tunnel present", "killswitch loaded", "links lo vc-" + f.name + " "} {
			if !slices.Contains(strings.Split(preOut, "\n"), w) {
				t.Errorf("confined service's first command: want %q", w)
			}
		}
		ready := propInt(t, f.agent, "ActiveEnterTimestampMonotonic")
		svcStart := propInt(t, f.pre, "InactiveExitTimestampMonotonic")
		if ready == 0 || svcStart < ready {
			t.Errorf("ordering: the confined service left inactive at %d µs, the agent became active (READY=1) at %d µs", svcStart, ready)
		}
		t.Logf("agent READY=1 at %d µs (monotonic), confined service started %d µs later", ready, svcStart-ready)
		if st, err := runErr(agentBin, "status", f.name, "--json"); err != nil || !strings.Contains(st, `"backend": "kernel"`) {
			t.Errorf("agent status (want healthy, kernel backend): %v\n%s", err, st)
		}
	})

	// Semantic 3: the namespace's resolver files, not the host's.
	check(t, "namespace-resolv-conf", func(t *testing.T) {
		if preOut == "" {
			t.Fatal("no output from the confined service")
		}
		var resolv, nss []string
		for _, l := range strings.Split(strings.TrimRight(preOut, "\n"), "\n") {
			if s, ok := strings.CutPrefix(l, "resolv "); ok {
				resolv = append(resolv, s)
			} else if s, ok := strings.CutPrefix(l, "nss "); ok {
				nss = append(nss, s)
			}
		}
		if want := nsFiles(t, "resolv.conf"); !slices.Equal(resolv, want) {
			t.Errorf("confined /etc/resolv.conf:\n%q\nwant the namespace's:\n%q", resolv, want)
		}
		if want := nsFiles(t, "nsswitch.conf"); !slices.Equal(nss, want) {
			t.Errorf("confined /etc/nsswitch.conf:\n%q\nwant the namespace's:\n%q", nss, want)
		}
		if slices.ContainsFunc(resolv, func(s string) bool { return strings.Contains(s, sdResolver.String()) }) {
			t.Errorf("the confined service sees the host's resolver %s", sdResolver)
		}
	})

	// The drop-in's process sandbox: io_uring, ptrace/pidfd refused, ProtectProc (sandbox_test.go).
	f.sandboxChecks(t)

	// Semantic 2: systemctl stop of the agent stops the confined service.
	check(t, "stops-with-agent", func(t *testing.T) {
		if active(f.pre) != "active" {
			f.startUnit(t, f.pre)
		}
		run(t, "systemctl", "stop", f.agent)
		if a := active(f.pre); a == "active" {
			t.Errorf("%s still %s after systemctl stop %s (BindsTo)", f.pre, a, f.agent)
		}
		if _, err := os.Stat(names.Netns(f.name)); err == nil {
			t.Errorf("/run/netns/%s left after the agent stopped", f.name)
		}
	})

	// Semantic 2 on a crash: SIGKILL of the agent stops the confined service (BindsTo=);
	// Restart=on-failure brings the agent back.
	check(t, "stops-on-agent-sigkill", func(t *testing.T) {
		f.startUnit(t, f.pre)
		pid := propInt(t, f.pre, "MainPID")
		agentPid := propInt(t, f.agent, "MainPID")
		restarts := propInt(t, f.agent, "NRestarts")
		t0 := time.Now()
		run(t, "systemctl", "kill", "-s", "KILL", f.agent)
		var stoppedAfter time.Duration
		var timeline []string
		last := ""
		gone := waitFor(20*time.Second, func() bool {
			s := fmt.Sprintf("agent %s/%s, service %s", prop(t, f.agent, "ActiveState"), prop(t, f.agent, "SubState"), active(f.pre))
			if s != last {
				timeline = append(timeline, fmt.Sprintf("+%.1fs %s", time.Since(t0).Seconds(), s))
				last = s
			}
			return syscall.Kill(int(pid), 0) != nil
		})
		stoppedAfter = time.Since(t0)
		if !gone {
			t.Fatalf("the confined service's process %d survived 20 s after the agent's SIGKILL:\n%s", pid, strings.Join(timeline, "\n"))
		}
		back := waitFor(30*time.Second, func() bool {
			return active(f.agent) == "active" && propInt(t, f.agent, "MainPID") != agentPid
		})
		timeline = append(timeline, fmt.Sprintf("+%.1fs agent %s (NRestarts %d), service %s", time.Since(t0).Seconds(),
			active(f.agent), propInt(t, f.agent, "NRestarts"), active(f.pre)))
		t.Logf("after systemctl kill -s KILL %s (service stopped %.1fs after the kill):\n%s", f.agent, stoppedAfter.Seconds(), strings.Join(timeline, "\n"))
		if !back || propInt(t, f.agent, "NRestarts") <= restarts {
			t.Fatalf("Restart=on-failure did not bring the agent back:\n%s", unitDiag(f.agent))
		}
		time.Sleep(time.Second)
		if a := active(f.pre); a == "active" {
			ready := propInt(t, f.agent, "ActiveEnterTimestampMonotonic")
			if s := propInt(t, f.pre, "InactiveExitTimestampMonotonic"); s < ready {
				t.Errorf("the confined service runs again but started (%d µs) before the new agent's READY=1 (%d µs)", s, ready)
			}
			t.Logf("note: without Upholds= the confined service was started again (the auto-restart's job propagated to it)")
		} else {
			t.Logf("without Upholds= the confined service stays %s after the agent's automatic restart", a)
		}
	})

	// Semantic 4 with nscd: the host's nscd resolves through the host's resolver (a decoy on
	// the uplink); a confined lookup never reaches it.
	check(t, "dns-nscd-no-leak", func(t *testing.T) {
		if active(f.agent) != "active" {
			f.startUnit(t, f.agent)
		}
		f.hostResolver(t, "nscd")
		systemctlAgain(t, "start", "nscd.service")
		if _, err := os.Stat("/run/nscd/socket"); err != nil {
			t.Fatalf("nscd runs but /run/nscd/socket: %v", err)
		}
		f.dnsCheck(t, "nscd")
	})
	// `vpn-agent exec NAME -- CMD` promises the namespace's resolvers, never the host's: with
	// nscd running, glibc asks nscd before reading resolv.conf.
	execCheck(t, "exec-nscd-no-leak", func(t *testing.T) {
		if active("nscd.service") != "active" {
			t.Skip("nscd is not running (dns-nscd-no-leak did not get that far)")
		}
		// Empty nscd's hosts cache first: it refreshes expiring entries (the
		// previous check's names, TTL 5 s) by asking the decoy over the
		// uplink, host traffic that would land in this check's capture.
		runErr("nscd", "-i", "hosts")
		f.execLookup(t, "nscd-exec")
	})
	// nscd reloads expired entries (reload-count) and the decoy's TTL is 5 s: the controls'
	// names would keep crossing the uplink during the next checks.
	runErr("nscd", "-i", "hosts")
	runErr("systemctl", "stop", "nscd.service")
	f.hostResolver(t, "")

	// Semantic 2 + no gap: systemctl restart of the agent while a confined service's traffic
	// runs. PartOf= restarts the service with it; the uplink carries only WireGuard; a
	// process left in the old namespace loses the tunnel and keeps the kill switch.
	check(t, "restart-no-leak", func(t *testing.T) {
		if active(f.agent) != "active" {
			f.startUnit(t, f.agent)
		}
		f.startUnit(t, f.loop)
		inv := prop(t, f.loop, "InvocationID")
		if !f.loopOK(inv, 3, 15*time.Second) {
			t.Fatalf("the confined traffic loop does not get through the tunnel:\n%v", f.loopLines())
		}
		// A process put into the namespace behind systemd's back, trying the host's
		// resolver, the endpoint and the tunnel all the time.
		orphan := exec.Command("/bin/bash", "-c",
			`while :; do echo x >/dev/udp/`+sdResolver.String()+`/53; echo y >/dev/udp/`+sdEndpoint.String()+`/7; (exec 3<>/dev/tcp/`+sdTunSrv.String()+`/7) 2>/dev/null; sleep 0.1; done`)
		f.startInNetns(t, orphan)
		t.Cleanup(func() { orphan.Process.Kill(); orphan.Wait() })
		oldNS := harness.Inode(t, names.Netns(f.name))
		up := f.uplinkCapture(t)
		agentPid := propInt(t, f.agent, "MainPID")
		t0 := time.Now()
		run(t, "systemctl", "restart", f.agent)
		if propInt(t, f.agent, "MainPID") == agentPid || active(f.agent) != "active" {
			t.Fatalf("the agent did not restart:\n%s", unitDiag(f.agent))
		}
		var inv2 string
		if !waitFor(20*time.Second, func() bool {
			inv2 = prop(t, f.loop, "InvocationID")
			return active(f.loop) == "active" && inv2 != inv
		}) {
			t.Fatalf("the confined service did not come back after the agent's restart (PartOf=): %s\n%s", active(f.loop), unitDiag(f.loop))
		}
		f.backAfterReady(t, inv2, "restarted")
		t.Logf("restart: traffic through the tunnel again %.1fs after systemctl restart", time.Since(t0).Seconds())
		// The orphan: still alive, in the old namespace, which lost the tunnel and kept the
		// kill switch.
		if orphan.ProcessState != nil || syscall.Kill(orphan.Process.Pid, 0) != nil {
			t.Fatalf("the orphan died")
		}
		pns := fmt.Sprintf("/proc/%d/ns/net", orphan.Process.Pid)
		if harness.Inode(t, pns) != oldNS || harness.Inode(t, names.Netns(f.name)) == oldNS {
			t.Errorf("the orphan should be in the old namespace, and the restarted agent in a new one")
		}
		links := run(t, "nsenter", "--net="+pns, "ip", "-o", "link", "show")
		if strings.Contains(links, names.Tunnel(f.name)) {
			t.Errorf("the old namespace kept the tunnel after the agent's teardown:\n%s", links)
		}
		if out, err := runErr("nsenter", "--net="+pns, "nft", "list", "table", "inet", names.Table); err != nil {
			t.Errorf("the old namespace lost its kill switch: %v\n%s", err, out)
		}
		leaks, all := f.stopUplink(t, up)
		if !slices.ContainsFunc(all, sdWG) {
			t.Errorf("no WireGuard on the uplink during the restart: the capture proves little:\n%s", observe.Dump(all))
		}
		if len(leaks) > 0 {
			t.Errorf("LEAK on the uplink across the restart:\n%s", observe.Dump(leaks))
		}
		orphan.Process.Kill()
		orphan.Wait()
	})

	// Failure recovery: with the agent-side drop-in `vpn-agent unit NAME --upholds SVC`,
	// after SIGKILL of the agent (Restart=on-failure) the confined service is started again,
	// after the agent's READY=1; no leak meanwhile.
	check(t, "upholds-after-sigkill", func(t *testing.T) {
		up := run(t, agentBin, "unit", f.name, "--restart-with-agent", f.loop) // Wants= since issue 12.20
		upholds := "/run/systemd/system/" + f.agent + ".d/upholds.conf"
		writeFile(t, upholds, up)
		run(t, "systemctl", "daemon-reload")
		defer func() { // the later checks restart the agent: no service to uphold then
			os.Remove(upholds)
			runErr("systemctl", "daemon-reload")
			runErr("systemctl", "stop", f.loop)
		}()
		if got := prop(t, f.agent, "Wants"); !strings.Contains(got, f.loop) {
			t.Fatalf("Wants of %s: %q", f.agent, got)
		}
		if active(f.loop) != "active" {
			f.startUnit(t, f.loop)
		}
		inv := prop(t, f.loop, "InvocationID")
		if !f.loopOK(inv, 2, 15*time.Second) {
			t.Fatalf("the confined traffic loop does not get through:\n%v", f.loopLines())
		}
		cap := f.uplinkCapture(t)
		agentPid := propInt(t, f.agent, "MainPID")
		t0 := time.Now()
		run(t, "systemctl", "kill", "-s", "KILL", f.agent)
		var inv2 string
		if !waitFor(40*time.Second, func() bool {
			inv2 = prop(t, f.loop, "InvocationID")
			return active(f.agent) == "active" && propInt(t, f.agent, "MainPID") != agentPid &&
				active(f.loop) == "active" && inv2 != inv
		}) {
			t.Fatalf("agent %s, service %s 40 s after SIGKILL\n%s\n%s", active(f.agent), active(f.loop), unitDiag(f.agent), unitDiag(f.loop))
		}
		f.backAfterReady(t, inv2, "upheld")
		t.Logf("SIGKILL: agent back and confined traffic flowing %.1fs later", time.Since(t0).Seconds())
		leaks, all := f.stopUplink(t, cap)
		if !slices.ContainsFunc(all, sdWG) {
			t.Errorf("no WireGuard on the uplink: the capture proves little")
		}
		if len(leaks) > 0 {
			t.Errorf("LEAK on the uplink across the crash:\n%s", observe.Dump(leaks))
		}
	})

	// Semantic 4 with systemd-resolved as the host's resolver (stub resolv.conf, nss-resolve).
	check(t, "dns-resolved-no-leak", func(t *testing.T) {
		f.hostResolver(t, "resolved")
		writeFile(t, "/run/systemd/resolved.conf.d/vmtest.conf",
			"[Resolve]\nDNS="+sdResolver.String()+"\nDNSSEC=no\nLLMNR=no\nMulticastDNS=no\nCache=no\n")
		run(t, "/opt/vpnc/bin/vpnc-enable-resolved")
		if a := active("systemd-resolved.service"); a != "active" {
			t.Fatalf("systemd-resolved is %s", a)
		}
		// The agent derives the namespace's nsswitch.conf from the host's when it comes up:
		// restart it on the resolved host.
		run(t, "systemctl", "restart", f.agent)
		if nss := strings.Join(nsFiles(t, "nsswitch.conf"), "\n"); strings.Contains(nss, "resolve") {
			t.Errorf("the namespace's nsswitch.conf still names nss-resolve:\n%s", nss)
		}
		f.dnsCheck(t, "resolved")
	})
	// vpn-agent exec on the resolved host: the plain lookup, and one forced through
	// nss-resolve (what any program that talks to resolved over its varlink or D-Bus API does).
	execCheck(t, "exec-resolved-no-leak", func(t *testing.T) {
		if active("systemd-resolved.service") != "active" {
			t.Skip("systemd-resolved is not running (dns-resolved-no-leak did not get that far)")
		}
		f.execLookup(t, "resolved-exec")
		f.execLookup(t, "resolved-exec-nss", "-s", "hosts:resolve")
	})
	runErr("/opt/vpnc/bin/vpnc-enable-resolved", "--undo")
	f.hostResolver(t, "")
}

// hostResolvers is held (write) while the systemd checks run a host resolver daemon (nscd,
// systemd-resolved) and point the VM's resolver at the decoy; tests that resolve names with
// glibc elsewhere (vpn-agent exec getent) hold it for reading, so that no lookup of theirs
// lands in those windows (should exec regress, exec-nscd-no-leak shows where it would go).
var hostResolvers sync.RWMutex

// hostResolver takes hostResolvers for daemon ("nscd", "resolved") or releases it ("").
func (f *sdFixture) hostResolver(t *testing.T, daemon string) {
	if daemon == "" {
		if f.resolverHeld {
			f.resolverHeld = false
			hostResolvers.Unlock()
		}
		return
	}
	if !f.resolverHeld {
		hostResolvers.Lock()
		f.resolverHeld = true
	}
}

// execCheck runs a check of `vpn-agent exec` and reports it for the tier summary.
func execCheck(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	summarized(t, "exec-check", name, fn)
}

// execLookup runs `vpn-agent exec NAME -- getent [args] hosts <what>.<id>.vmtest` from the
// host and fails t if the lookup went anywhere but the tunnel: a decoy hit, anything on the
// uplink but WireGuard, or the decoy's answer. (A lookup forced through nss-resolve may fail;
// it must not leak.)
//
// Then the same lookup (name <what>-fix) as a reference: the host resolvers' IPC made
// inaccessible by hand, as the drop-in does (vpn-agent exec inside `unshare -m` with those
// mounts made first; exec's own mount namespace inherits them). Since db9591e exec does this
// itself; the reference keeps the approach proven should exec regress.
func (f *sdFixture) execLookup(t *testing.T, what string, args ...string) {
	t.Helper()
	for _, fixed := range []bool{false, true} {
		q, label := f.qname(what), "vpn-agent exec"
		argv := append(append([]string{agentBin, "exec", f.name, "--", "getent"}, args...), "hosts")
		if fixed {
			q, label = f.qname(what+"-fix"), "with the IPC hidden by hand (reference)"
			argv = append([]string{"unshare", "-m", "/bin/sh", "-c", execFixScript, "sh"}, argv...)
		}
		argv = append(argv, q)
		rmark, tmark := f.resolver.Mark(), f.tunnel.Mark()
		up := f.uplinkCapture(t)
		out, err := runErr(argv[0], argv[1:]...)
		leaks, _ := f.stopUplink(t, up)
		leaks, hostDNS := splitHostDNS(leaks, q)
		t.Logf("%s: %s: err=%v\n%s", label, strings.Join(argv, " "), err, out)
		if len(hostDNS) > 0 {
			t.Logf("%s: the host's own DNS to its resolver crossed the uplink meanwhile, not for %s (a host resolver daemon refreshing its cache):\n%s", label, q, observe.Dump(hostDNS))
		}
		if ev := resolverHits(t, f.resolver, rmark, q); len(ev) > 0 || strings.Contains(out, sdDecoyAns.String()) {
			t.Errorf("%s: DNS LEAK: the host's resolver (decoy) answered %s (log:\n%s)", label, q, harness.DumpEvents(ev))
		}
		if len(leaks) > 0 {
			t.Errorf("%s: LEAK on the uplink during getent:\n%s", label, observe.Dump(leaks))
		}
		if len(args) == 0 {
			if !strings.HasPrefix(out, sdTunSrv.String()+" ") || len(resolverHits(t, f.tunnel, tmark, q)) == 0 {
				t.Errorf("%s: getent hosts %s: want the tunnel resolver's answer %s, through the tunnel", label, q, sdTunSrv)
			}
		}
	}
}

// splitHostDNS separates, from uplink packets that are not WireGuard, the
// host's own DNS exchanges with its resolver (the decoy) that do not carry
// the name q: with nscd or systemd-resolved running on the host, they
// refresh cached entries on their own. A packet carrying q, or anything
// else, stays a leak.
func splitHostDNS(pkts []observe.Packet, q string) (leaks, hostDNS []observe.Packet) {
	var wire []byte // q in DNS wire format, lower case
	for _, l := range strings.Split(strings.ToLower(q), ".") {
		wire = append(append(wire, byte(len(l))), l...)
	}
	for _, p := range pkts {
		dns := (p.Proto == observe.ProtoUDP || p.Proto == observe.ProtoTCP) &&
			((p.Dst == sdResolver && p.DstPort == 53) || (p.Src == sdResolver && p.SrcPort == 53))
		if dns && !bytes.Contains(bytes.ToLower(p.Payload), wire) {
			hostDNS = append(hostDNS, p)
		} else {
			leaks = append(leaks, p)
		}
	}
	return leaks, hostDNS
}

// execFixScript (the reference for exec) makes the host resolvers' IPC inaccessible in the current (private) mount
// namespace, the way the confinement drop-in does for units, then execs its arguments.
const execFixScript = `set -e
for d in /run/nscd; do [ ! -d $d ] || mount -t tmpfs -o ro,mode=000 tmpfs $d; done
for s in /run/systemd/resolve/io.systemd.Resolve /run/systemd/resolve/io.systemd.Resolve.Monitor /run/dbus/system_bus_socket; do
	[ ! -e $s ] || mount --bind /dev/null $s
done
exec "$@"`

// dnsCheck: with the host resolver daemon `what` (nscd or resolved) running,
//   - a confined `getent hosts` resolves through the tunnel (the tunnel's answer, its query in
//     the tunnel resolver's log), the decoy sees nothing and the uplink carries nothing but
//     WireGuard;
//   - positive controls: the same lookup from an unconfined service reaches the decoy (its
//     answer, its log, a DNS packet to it on the uplink), and so does one from a service that
//     is only put into the namespace (NetworkNamespacePath= alone): the host daemon's IPC is
//     the leak path the drop-in closes.
func (f *sdFixture) dnsCheck(t *testing.T, what string) {
	t.Helper()
	dnsTo := func(p observe.Packet) bool {
		return p.Dst == sdResolver && p.DstPort == 53 && (p.Proto == observe.ProtoUDP || p.Proto == observe.ProtoTCP)
	}

	// confined looks up qname(name) from a service of the given kind and returns what went
	// wrong: the lookup must succeed through the tunnel and nothing may leak.
	confined := func(kind, name string) (problems []string) {
		tmark, rmark := f.tunnel.Mark(), f.resolver.Mark()
		up := f.uplinkCapture(t)
		out, diag := f.getent(t, kind, name)
		leaks, _ := f.stopUplink(t, up)
		if !strings.HasPrefix(out, sdTunSrv.String()+" ") {
			problems = append(problems, fmt.Sprintf("lookup: got %q, want the tunnel resolver's answer %s", out, sdTunSrv))
		}
		reach, rc := ipc(diag)
		for _, s := range []string{nscdSock, resolvedSock, dbusSock} {
			if r, ok := reach[s]; !ok || r {
				problems = append(problems, fmt.Sprintf("host resolver IPC %s: reachable=%v (known=%v), want blocked", s, r, ok))
			}
		}
		if rc == "" || rc == "0" {
			problems = append(problems, fmt.Sprintf("getent -s hosts:resolve (nss-resolve forced) rc=%q, want a failure", rc))
		}
		tev := resolverHits(t, f.tunnel, tmark, f.qname(name))
		if !slices.ContainsFunc(tev, func(e provider.Event) bool { return harness.HostOf(e.Src) == sdTunCli }) {
			problems = append(problems, fmt.Sprintf("the tunnel's resolver did not log the query from %s:\n%s", sdTunCli, harness.DumpEvents(harness.Hits(t, f.tunnel, tmark))))
		}
		if ev := harness.Hits(t, f.resolver, rmark); len(ev) > 0 {
			problems = append(problems, "DNS LEAK: the host's resolver (decoy) saw:\n"+harness.DumpEvents(ev))
		}
		if len(leaks) > 0 {
			problems = append(problems, "LEAK on the uplink during the lookup:\n"+observe.Dump(leaks))
		}
		return problems
	}
	for _, p := range confined("confined", what) {
		t.Errorf("confined service (drop-in of vpn-agent unit): %s", p)
	}
	if what == "resolved" {
		if p := confined("fixed", what+"-fix"); len(p) > 0 {
			t.Errorf("reference drop-in (resolved's sockets inaccessible, not the directory):\n%s", strings.Join(p, "\n"))
		} else {
			t.Logf("reference drop-in (InaccessiblePaths= on resolved's sockets, not on /run/systemd/resolve): the confined lookup goes through the tunnel, no leak")
		}
	}

	for _, kind := range []string{"plain", "nsonly"} {
		name := what + "-ctl"
		if kind == "nsonly" {
			name = what + "-ns"
		}
		rmark := f.resolver.Mark()
		up := f.uplinkCapture(t)
		out, diag := f.getent(t, kind, name)
		_, all := f.stopUplink(t, up)
		seen := slices.ContainsFunc(all, dnsTo)
		logged := len(resolverHits(t, f.resolver, rmark, f.qname(name))) > 0
		if !strings.HasPrefix(out, sdDecoyAns.String()+" ") || !seen || !logged {
			t.Errorf("positive control (%s service, through %s): answer %q (want %s), DNS to %s on the uplink %v, in its log %v:\n%s",
				kind, what, out, sdDecoyAns, sdResolver, seen, logged, observe.Dump(all))
		}
		// ... and the IPC the drop-in blocks is there to be blocked.
		reach, _ := ipc(diag)
		daemonSock := map[string]string{"nscd": nscdSock, "resolved": resolvedSock}[what]
		for _, s := range []string{daemonSock, dbusSock} {
			if !reach[s] {
				t.Errorf("positive control (%s service): %s not reachable, so blocking it proves nothing", kind, s)
			}
		}
	}
}
