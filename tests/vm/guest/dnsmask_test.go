package guest

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// Issue 12 item 21: the masks over the host resolvers' IPC must survive the host daemons'
// restarts and late starts. Until then they were InaccessiblePaths= on the socket files
// (and on /run/nscd, skipped with "-" when absent): a daemon that restarts unlinks its
// socket (resolved) or has systemd remove its RuntimeDirectory (NixOS's nscd), Linux
// detaches a mount in every other mount namespace when its mountpoint is unlinked, and the
// running confined services' lookups were answered by the host's resolver. Now the
// directories are covered (TemporaryFileSystem=, exec's tmpfs), created first when absent,
// and nscd keeps /run/nscd (dist/systemd/nscd-vpn-confinement.conf, the NixOS module).
//
// Each case looks a fresh name up from inside a confined service that was running before
// the event (nsenter into its mount and network namespaces: what the service itself would
// see), and from inside a long-running `vpn-agent exec`: the decoy (the host's resolver)
// must log nothing and the uplink carry nothing but WireGuard; the tunnel's resolver must
// log the query. Positive control after each event: the same kind of lookup from the host
// reaches the decoy through the restarted daemon. The old masks are run beside the new as
// evidence of the bug (logged, not judged).

// dmOldDropIn is the confinement drop-in before the fix: socket files and "-" (skipped
// when absent).
func dmOldDropIn(name string) string {
	return "[Service]\nNetworkNamespacePath=/run/netns/" + name + "\n" +
		"BindReadOnlyPaths=/etc/netns/" + name + "/resolv.conf:/etc/resolv.conf /etc/netns/" + name + "/nsswitch.conf:/etc/nsswitch.conf\n" +
		"InaccessiblePaths=-/run/nscd -/var/run/nscd -/run/systemd/resolve/io.systemd.Resolve " +
		"-/run/systemd/resolve/io.systemd.Resolve.Monitor -/run/dbus/system_bus_socket\n"
}

// dmProc is a confined long-running process whose namespaces a lookup enters.
type dmProc struct {
	label string
	pid   func() int
}

// dmLookup runs `getent hosts q` inside p's mount and network namespaces and returns what
// went wrong: a decoy hit, a leak on the uplink, no query at the tunnel's resolver, a host
// resolver socket that can be connected to, or nss-resolve answering.
func (f *sdFixture) dmLookup(t *testing.T, p dmProc, what string) (problems []string) {
	t.Helper()
	pid := p.pid()
	if pid <= 0 {
		return []string{"no process"}
	}
	q := f.qname(what)
	ns := []string{"nsenter", "-t", strconv.Itoa(pid), "-m", "-n", "--"}
	rmark, tmark := f.resolver.Mark(), f.tunnel.Mark()
	up := f.uplinkCapture(t)
	out, err := runErr(ns[0], append(ns[1:], "getent", "hosts", q)...)
	leaks, _ := f.stopUplink(t, up)
	leaks, hostDNS := splitHostDNS(leaks, q)
	t.Logf("%s (pid %d): getent hosts %s: err=%v %s", p.label, pid, q, err, strings.TrimSpace(out))
	if len(hostDNS) > 0 {
		t.Logf("%s: host DNS not for %s crossed the uplink meanwhile (a daemon refreshing its cache):\n%s", p.label, q, observe.Dump(hostDNS))
	}
	if ev := resolverHits(t, f.resolver, rmark, q); len(ev) > 0 || strings.Contains(out, sdDecoyAns.String()) {
		problems = append(problems, fmt.Sprintf("DNS LEAK: the host's resolver (decoy) got %s:\n%s", q, harness.DumpEvents(ev)))
	}
	if len(leaks) > 0 {
		problems = append(problems, "LEAK on the uplink:\n"+observe.Dump(leaks))
	}
	if !slices.ContainsFunc(resolverHits(t, f.tunnel, tmark, q), func(e provider.Event) bool { return harness.HostOf(e.Src) == sdTunCli }) {
		problems = append(problems, fmt.Sprintf("the tunnel's resolver did not log %s from %s", q, sdTunCli))
	}
	for _, s := range []string{nscdSock, resolvedSock, dbusSock} {
		if _, err := runErr(ns[0], append(ns[1:], "timeout", "5", "socat", "-u", "OPEN:/dev/null", "UNIX-CONNECT:"+s)...); err == nil {
			problems = append(problems, s+" can be connected to")
		}
	}
	if _, err := runErr(ns[0], append(ns[1:], "timeout", "10", "getent", "-s", "hosts:resolve", "hosts", q+"-nss")...); err == nil {
		problems = append(problems, "a lookup forced through nss-resolve succeeded")
	}
	resolv, _ := runErr(ns[0], append(ns[1:], "cat", "/etc/resolv.conf")...)
	if want, _ := os.ReadFile(names.ResolvConf(f.name)); resolv != string(want) {
		problems = append(problems, fmt.Sprintf("/etc/resolv.conf is not the namespace's:\n%s", resolv))
	}
	return problems
}

// dmControl: an unconfined lookup from the host reaches the decoy (through the daemon that
// just restarted or started): the decoy answers unconfined lookups, so its silence above
// means something.
func (f *sdFixture) dmControl(t *testing.T, what string) {
	t.Helper()
	q := f.qname(what)
	rmark := f.resolver.Mark()
	out, err := runErr("getent", "hosts", q)
	if len(resolverHits(t, f.resolver, rmark, q)) == 0 {
		t.Errorf("positive control: unconfined getent hosts %s (err=%v %q) did not reach the decoy", q, err, out)
	}
}

// dmOldMask reports, without judging, whether the pre-fix drop-in still blocks what.
func (f *sdFixture) dmOldMask(t *testing.T, unit, sock, event string) {
	t.Helper()
	pid := propInt(t, unit, "MainPID")
	_, err := runErr("nsenter", "-t", strconv.Itoa(int(pid)), "-m", "-n", "--", "timeout", "5", "socat", "-u", "OPEN:/dev/null", "UNIX-CONNECT:"+sock)
	state := "still blocked"
	if err == nil {
		state = "REACHABLE (the bug: the old mask is gone)"
	}
	t.Logf("evidence, old drop-in (InaccessiblePaths= on socket files, \"-\"): after %s, %s from the running service: %s", event, sock, state)
}

func dmIno(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	return strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)
}

// TestResolverMasksSurvive: issue 12 item 21 under systemd 252 with the shipped units.
// Not parallel: it shares newSDFixture's uplink and "internet" with TestSystemdConfinement
// (non-parallel tests run before the parallel ones).
func TestResolverMasksSurvive(t *testing.T) {
	f := newSDFixture(t)
	hold := "vmtest-hold-" + f.name + ".service"
	old := "vmtest-oldmask-" + f.name + ".service"
	dropIn := run(t, agentBin, "unit", f.name)
	writeFile(t, "/run/systemd/system/"+hold, "[Service]\nExecStart=/bin/sleep infinity\n")
	writeFile(t, "/run/systemd/system/"+hold+".d/vpn-confinement.conf", dropIn)
	writeFile(t, "/run/systemd/system/"+old, "[Unit]\nBindsTo="+f.agent+"\nAfter="+f.agent+"\n[Service]\nExecStart=/bin/sleep infinity\n")
	writeFile(t, "/run/systemd/system/"+old+".d/old.conf", dmOldDropIn(f.name))
	nscdD := "/run/systemd/system/nscd.service.d/"
	t.Cleanup(func() {
		os.RemoveAll(nscdD)
		runErr("systemctl", "daemon-reload")
	})
	run(t, "systemctl", "daemon-reload")
	f.startUnit(t, f.agent)
	f.hostResolver(t, "nscd")

	svc := dmProc{"confined service", func() int { return int(propInt(t, hold, "MainPID")) }}
	var execCmd *exec.Cmd
	startExec := func(t *testing.T) dmProc {
		if execCmd != nil {
			execCmd.Process.Kill()
			execCmd.Wait()
		}
		// startInNetns starts it in f's namespace; nsenter takes it back to the host's
		// (PID 1's), so that vpn-agent exec itself enters f's, as when an admin runs it.
		execCmd = exec.Command("nsenter", "--net=/proc/1/ns/net", agentBin, "exec", f.name, "--", "sleep", "600")
		f.startInNetns(t, execCmd)
		// exec replaces itself with sleep once the mounts are made: wait for that.
		pid := execCmd.Process.Pid
		if !waitFor(10*time.Second, func() bool {
			c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			return strings.TrimSpace(string(c)) == "sleep"
		}) {
			t.Fatalf("vpn-agent exec did not start sleep")
		}
		return dmProc{"vpn-agent exec", func() int { return pid }}
	}
	t.Cleanup(func() {
		if execCmd != nil {
			execCmd.Process.Kill()
			execCmd.Wait()
		}
	})
	judge := func(t *testing.T, p dmProc, what string) {
		for _, pr := range f.dmLookup(t, p, what) {
			t.Errorf("%s: %s", p.label, pr)
		}
	}
	// The exec checks' lookups run inside the systemd checks' scenarios (same events);
	// execCheck reports what they found.
	execProblems := map[string][]string{}
	execRan := map[string]bool{}
	execJudge := func(t *testing.T, check string, p dmProc, what string) {
		execRan[check] = true
		for _, pr := range f.dmLookup(t, p, what) {
			execProblems[check] = append(execProblems[check], what+": "+pr)
		}
	}
	execReport := func(name string) {
		execCheck(t, name, func(t *testing.T) {
			if !execRan[name] {
				t.Skip("the scenario did not get that far")
			}
			for _, pr := range execProblems[name] {
				t.Errorf("vpn-agent exec: %s", pr)
			}
		})
	}

	// nscd restarts. Debian's nscd keeps /run/nscd (tmpfiles); NixOS's has
	// RuntimeDirectory=nscd, emulated by a drop-in, plus the shipped
	// RuntimeDirectoryPreserve= drop-in; without the latter (evidence only)
	// systemd removes the directory at each restart.
	var ex dmProc
	check(t, "dns-nscd-restart-no-leak", func(t *testing.T) {
		for _, variant := range []string{"debian", "nixos-preserve", "nixos-without-preserve"} {
			os.RemoveAll(nscdD)
			if variant != "debian" {
				writeFile(t, nscdD+"runtimedir.conf", "[Service]\nRuntimeDirectory=nscd\n")
			}
			if variant == "nixos-preserve" {
				writeFile(t, nscdD+"vpn-confinement.conf", harness.ReadFile(t, "/opt/vpnc/dist/systemd/nscd-vpn-confinement.conf"))
			}
			run(t, "systemctl", "daemon-reload")
			systemctlAgain(t, "restart", "nscd.service")
			run(t, "systemctl", "restart", hold, old)
			ex = startExec(t)
			ino := dmIno("/run/nscd")
			systemctlAgain(t, "restart", "nscd.service")
			if _, err := os.Stat(nscdSock); err != nil {
				t.Fatalf("%s: nscd restarted but %s: %v", variant, nscdSock, err)
			}
			t.Logf("%s: /run/nscd inode %s before the restart, %s after", variant, ino, dmIno("/run/nscd"))
			if variant == "nixos-without-preserve" {
				// The premise of the preserve drop-in: the mask is lost.
				for _, p := range []dmProc{svc, ex} {
					pr := f.dmLookup(t, p, "dm-nscd-nopreserve-"+strings.ReplaceAll(p.label, " ", ""))
					t.Logf("evidence, without RuntimeDirectoryPreserve= (%s): %d problems: %s", p.label, len(pr), strings.Join(pr, "; "))
				}
				runErr("nscd", "-i", "hosts")
				continue
			}
			if ino != dmIno("/run/nscd") {
				t.Errorf("%s: /run/nscd was replaced by nscd's restart", variant)
			}
			judge(t, svc, "dm-nscd-restart-"+variant)
			execJudge(t, "exec-nscd-restart-no-leak", ex, "dm-exec-nscd-restart-"+variant)
			f.dmOldMask(t, old, nscdSock, "nscd restart ("+variant+")")
			f.dmControl(t, "dm-nscd-restart-ctl-"+variant)
		}
		os.RemoveAll(nscdD)
		run(t, "systemctl", "daemon-reload")
		systemctlAgain(t, "restart", "nscd.service")
	})
	execReport("exec-nscd-restart-no-leak")

	// nscd starts after the confined service: /run/nscd absent at its start.
	check(t, "dns-nscd-late-start-no-leak", func(t *testing.T) {
		run(t, "systemctl", "stop", "nscd.service", hold, old)
		if err := os.RemoveAll("/run/nscd"); err != nil {
			t.Fatal(err)
		}
		f.startUnit(t, old) // the old drop-in skips the absent /run/nscd ("-")
		f.startUnit(t, hold)
		// Type=simple: systemctl returns at the fork, before the child sets up its mounts.
		if !waitFor(10*time.Second, func() bool { _, err := os.Stat("/run/nscd"); return err == nil }) {
			t.Errorf("the confined service's start did not create /run/nscd")
		}
		ex = startExec(t)
		systemctlAgain(t, "start", "nscd.service")
		if _, err := os.Stat(nscdSock); err != nil {
			t.Fatalf("nscd started but %s: %v", nscdSock, err)
		}
		judge(t, svc, "dm-nscd-late")
		execJudge(t, "exec-nscd-late-start-no-leak", ex, "dm-exec-nscd-late")
		f.dmOldMask(t, old, nscdSock, "nscd's late start")
		f.dmControl(t, "dm-nscd-late-ctl")
	})
	execReport("exec-nscd-late-start-no-leak")
	runErr("nscd", "-i", "hosts")
	runErr("systemctl", "stop", "nscd.service")

	// systemd-resolved restarts: it re-binds its varlink sockets and rewrites
	// stub-resolv.conf, where /etc/resolv.conf points.
	check(t, "dns-resolved-restart-no-leak", func(t *testing.T) {
		f.hostResolver(t, "resolved")
		writeFile(t, "/run/systemd/resolved.conf.d/vmtest.conf",
			"[Resolve]\nDNS="+sdResolver.String()+"\nDNSSEC=no\nLLMNR=no\nMulticastDNS=no\nCache=no\n")
		run(t, "/opt/vpnc/bin/vpnc-enable-resolved")
		run(t, "systemctl", "restart", hold, old)
		ex = startExec(t)
		judge(t, svc, "dm-resolved-before")
		sock := dmIno(resolvedSock)
		run(t, "systemctl", "restart", "systemd-resolved.service")
		if !waitFor(10*time.Second, func() bool { _, err := os.Stat(resolvedSock); return err == nil }) {
			t.Fatalf("resolved restarted but %s is missing", resolvedSock)
		}
		t.Logf("resolved's varlink socket inode %s before the restart, %s after", sock, dmIno(resolvedSock))
		judge(t, svc, "dm-resolved-restart")
		execJudge(t, "exec-resolved-restart-no-leak", ex, "dm-exec-resolved-restart")
		f.dmOldMask(t, old, resolvedSock, "resolved's restart")
		f.dmControl(t, "dm-resolved-restart-ctl")
	})
	execReport("exec-resolved-restart-no-leak")
	runErr("/opt/vpnc/bin/vpnc-enable-resolved", "--undo")
	f.hostResolver(t, "")
}
