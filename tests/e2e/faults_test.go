package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The fault suite: faults the agent must survive with no leak at any
// point (captures on the host's uplink and LAN link, and every decoy's
// log, for the whole test) and a correct state afterwards. The sites are
// the leak matrix's (host link with a published port, so every step of Up
// does something).

// negRows are the matrix's probes that must get nowhere, from inside the
// namespace and towards it.
func negRows() []*mrow {
	var out []*mrow
	for _, r := range matrixRows() {
		if r.kind == kNeg || r.kind == kInboundNeg {
			out = append(out, r)
		}
	}
	return out
}

// closeClean closes w and fails t for every leak, attributing it.
func closeClean(t *testing.T, w *window, s *site) {
	t.Helper()
	ev := w.close(matrixRows(), closeOptions{endpoint: s.endpoint})
	for id, l := range ev.leaks {
		t.Errorf("%s: LEAK (%s): %s", w.what, id, strings.Join(l, "; "))
	}
}

// assertNoReach runs the negative probes once and fails t for any that
// reached its target.
func assertNoReach(t *testing.T, w *window, when string) {
	t.Helper()
	rows := negRows()
	w.round(rows)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rows {
		res := w.results[r.id]
		if x := res[len(res)-1]; x.Reached() {
			t.Errorf("%s: LEAK: %s reached its target: %v", when, r.id, x)
		}
	}
}

// confinedOf adapts a site for the resource checks of down_test.go.
func confinedOf(s *site) *confined {
	return &confined{tp: s.tp, ag: s.ag, name: s.name, path: s.path}
}

// agentPIDs lists running vpn-agent processes started with this config.
func agentPIDs(cfg string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(cfg)) || zombie(pid) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && (filepath.Base(args[0]) == filepath.Base(env.agentBin) || filepath.Base(args[0]) == filepath.Base(env.hooksBin)) {
			out = append(out, pid)
		}
	}
	return out
}

// assertNothingLeft checks that no trace of the namespace remains: no
// netns, link, table, resolver or runtime file, lock or agent process.
func assertNothingLeft(t *testing.T, s *site, when string) {
	t.Helper()
	assertGone(t, confinedOf(s), when)
	if pids := agentPIDs(s.path); len(pids) > 0 {
		t.Errorf("%s: vpn-agent processes for this config still run: %v", when, pids)
	}
}

// oneLineError checks that a failed command printed its error as one
// "vpn-agent: ..." line, the last on stderr, containing want.
func oneLineError(t *testing.T, o agentproc.Output, want string) {
	t.Helper()
	var errLines []string
	for _, l := range strings.Split(strings.TrimSpace(o.Stderr), "\n") {
		if strings.HasPrefix(l, "vpn-agent: ") {
			errLines = append(errLines, l)
		}
	}
	lines := strings.Split(strings.TrimSpace(o.Stderr), "\n")
	switch {
	case len(errLines) != 1:
		t.Errorf("want exactly one `vpn-agent: ...` error line, got %d:\n%s", len(errLines), o)
	case lines[len(lines)-1] != errLines[0]:
		t.Errorf("the error is not the last line of stderr:\n%s", o)
	case !strings.Contains(errLines[0], want):
		t.Errorf("the error does not mention %q: %s", want, errLines[0])
	}
}

// recoverAndDown brings the namespace up with `up` or `run` (alternating
// with i), checks it is healthy (traffic through the tunnel, status
// healthy), then takes it down and checks nothing is left. It returns the
// command used.
func recoverAndDown(t *testing.T, s *site, i int, when string) string {
	t.Helper()
	how := "up"
	var d *agentproc.Daemon
	if i%2 == 0 {
		o := s.ag.MustCmd(t, "up", "--config", s.path)
		t.Cleanup(func() { killStray(t, upPID(o.Stdout)) })
	} else {
		how = "run"
		d = s.ag.Run(t, s.path)
	}
	s.mustTunnel(t, 10*time.Second, when+", then "+how)
	if healthy, code, st, out := waitHealthy(s, 5*time.Second); !healthy {
		t.Errorf("%s, then %s: status not healthy (exit %d): %v\n%s", when, how, code, st["problems"], out.Stdout)
	}
	s.ag.MustCmd(t, "down", s.name)
	if d != nil {
		if err := d.Wait(10 * time.Second); err != nil {
			t.Errorf("%s: `run` after `down`: %v", when, err)
		}
	}
	assertNothingLeft(t, s, when+", "+how+" and down")
	return how
}

// waitHealthy polls status until healthy or timeout.
func waitHealthy(s *site, timeout time.Duration) (bool, int, map[string]any, agentproc.Output) {
	deadline := time.Now().Add(timeout)
	for {
		healthy, code, st, out := s.statusOf()
		if healthy || time.Now().After(deadline) {
			return healthy, code, st, out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hooked is the site's agent as the vpn-agent built with the
// fault-injection hooks, with them switched on and set by kv.
func hooked(s *site, kv ...string) agentproc.Agent {
	a := s.ag
	a.Bin = env.hooksBin
	a.Env = append([]string{"VPN_AGENT_TEST_HOOKS=1"}, kv...)
	return a
}

// TestFaultInjectedError interrupts `up` and `run` after each step of Up
// with an injected error (VPN_AGENT_FAIL_AFTER): the command fails with
// one line and exit 1, nothing is left behind (no namespace, link, table,
// resolver or runtime file, lock or process), and the next `up`/`run`
// brings a healthy namespace. Subtests: after-STEP/{up,run}.
func TestFaultInjectedError(t *testing.T) {
	t.Parallel()
	requireHooks(t)
	s := newSite(t, siteOptions{})
	w := s.open(t, "injected errors")
	var done []string
	for i, step := range engine.Steps {
		t.Run("after-"+step, func(t *testing.T) {
			when := "injected error after step " + step
			a := hooked(s, "VPN_AGENT_FAIL_AFTER="+step)
			for _, cmd := range []string{"up", "run"} {
				t.Run(cmd, func(t *testing.T) {
					o := a.Cmd(cmd, "--config", s.path)
					if code := o.ExitCode(); code != 1 {
						t.Errorf("%s: `%s` exit code %d, want 1:\n%s", when, cmd, code, o)
					}
					oneLineError(t, o, "injected fault")
					assertNothingLeft(t, s, fmt.Sprintf("%s (%s)", when, cmd))
				})
				if cmd == "run" {
					// Whatever the failed run left must not stop the next one.
					os.Remove(names.StateDir(s.name))
				}
			}
			done = append(done, step+"→"+recoverAndDown(t, s, i, when))
		})
	}
	closeClean(t, w, s)
	recordFault(t, fmt.Sprintf("up and run interrupted by an injected error after each of %d steps: one-line error, nothing left, then up/run healthy (%s)",
		len(engine.Steps), strings.Join(done, " ")))
}

// TestFaultKilledBetweenSteps SIGKILLs the agent after each step of Up
// (VPN_AGENT_KILL_AFTER, via `up`: the detached `run` with the userspace
// backend, `up` itself with the kernel's). The namespace stays, closed
// (kill switch loaded, or no interface yet), nothing gets out of it,
// status says degraded, and the next `up`/`run` adopts it and is healthy.
// Subtests: after-STEP.
func TestFaultKilledBetweenSteps(t *testing.T) {
	t.Parallel()
	requireHooks(t)
	s := newSite(t, siteOptions{})
	w := s.open(t, "killed between steps")
	userspace := s.backend == string(config.BackendUserspace)
	var done []string
	for i, step := range engine.Steps {
		t.Run("after-"+step, func(t *testing.T) {
			when := "SIGKILL after step " + step
			o := hooked(s, "VPN_AGENT_KILL_AFTER="+step).Cmd("up", "--config", s.path)
			if o.Err == nil {
				t.Fatalf("%s: `up` succeeded:\n%s", when, o)
			}
			if userspace {
				// The detached `run` died; `up` says so in one line.
				oneLineError(t, o, "signal: killed")
			}
			if pids := agentPIDs(s.path); len(pids) > 0 {
				t.Errorf("%s: agent processes still run: %v", when, pids)
			}
			if !harness.Mounted(s.name) {
				t.Fatalf("%s: the namespace is gone; a crash must leave it (closed) for the next up", when)
			}
			table := okIn(s.name, "nft", "list", "table", "inet", names.Table)
			switch {
			case table:
			case i >= indexOf(engine.Steps, engine.StepPolicy):
				t.Errorf("%s: the namespace has no kill switch", when)
			default:
				// Killed before the kill switch: there must be nothing
				// to send through either.
				if links := nsLinks(s.name); len(links) != 1 || links[0] != "lo" {
					t.Errorf("%s: no kill switch yet, but the namespace has links %v", when, links)
				}
			}
			assertNoReach(t, w, when)
			if healthy, code, st, out := s.statusOf(); userspace && (healthy || code != 1) {
				t.Errorf("%s: status healthy=%v exit %d, want degraded (exit 1): %v\n%s", when, healthy, code, st["problems"], out.Stderr)
			}
			done = append(done, step+"→"+recoverAndDown(t, s, i+1, when))
		})
	}
	closeClean(t, w, s)
	recordFault(t, fmt.Sprintf("up SIGKILLed after each of %d steps: namespace left closed, no probe got out, status degraded, then up/run adopted it healthy (%s)",
		len(engine.Steps), strings.Join(done, " ")))
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// nsLinks lists the link names in namespace ns.
func nsLinks(ns string) []string {
	out, err := harness.Output(ns, "ip", "-o", "link", "show")
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			n := strings.TrimSuffix(f[1], ":")
			if i := strings.IndexByte(n, '@'); i >= 0 {
				n = n[:i]
			}
			names = append(names, n)
		}
	}
	return names
}

// TestFaultConcurrentStart starts two agents for the same namespace at
// once: one wins; the other fails cleanly (exit 1, one line naming the
// other vpn-agent) or, for `up`, reports the namespace already up by the
// winner; the winner is intact (healthy, its runtime files in place).
// Subtests: run+run, up+up (3 rounds), up+up/winner-files-kept.
func TestFaultConcurrentStart(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	w := s.open(t, "concurrent start")
	userspace := s.backend == string(config.BackendUserspace)

	t.Run("run+run", func(t *testing.T) {
		var ds [2]*agentproc.Daemon
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); ds[i], errs[i] = s.ag.Start(s.path) }()
		}
		wg.Wait()
		var winner *agentproc.Daemon
		for i := range 2 {
			if errs[i] == nil {
				if winner != nil {
					t.Errorf("both agents became ready")
					ds[i].Stop()
					continue
				}
				winner = ds[i]
				continue
			}
			msg := errs[i].Error()
			if !strings.Contains(msg, "exit status 1") || strings.Count(msg, "vpn-agent: ") != 1 || !strings.Contains(msg, "another vpn-agent") {
				t.Errorf("the losing run did not fail with one line naming the other vpn-agent (exit 1):\n%v", msg)
			}
		}
		if winner == nil {
			t.Fatalf("no agent became ready: %v; %v", errs[0], errs[1])
		}
		s.mustTunnel(t, 5*time.Second, "the winner")
		healthy, _, st, out := waitHealthy(s, 5*time.Second)
		if ap, _ := st["agentPid"].(float64); !healthy || int(ap) != winner.Pid() {
			t.Errorf("after the race: healthy=%v agentPid=%v (winner %d):\n%s", healthy, st["agentPid"], winner.Pid(), out.Stdout)
		}
		assertNoReach(t, w, "after two runs raced")
		must(t, winner.Stop())
		assertNothingLeft(t, s, "after the winner stopped")
	})

	t.Run("up+up", func(t *testing.T) {
		var lost []string // the winner's runtime files the race removed
		for round := range 3 {
			var outs [2]agentproc.Output
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); outs[i] = s.ag.Cmd("up", "--config", s.path) }()
			}
			wg.Wait()
			// Userspace: one `up` starts the agent (its pid printed); the
			// other says it is already up (same pid) or fails naming the
			// other vpn-agent. Kernel: up runs in-process; the loser fails
			// the same way, or converges after the winner (both "up").
			started, pid := 0, 0
			for _, o := range outs {
				if p := upPID(o.Stdout); p > 0 {
					t.Cleanup(func() { killStray(t, p) })
				}
				// "already up (agent pid N)" also contains " up (": not a start.
				if o.Err == nil && strings.Contains(o.Stdout, " up (") && !strings.Contains(o.Stdout, "already up") {
					started++
					pid = upPID(o.Stdout)
				}
			}
			if started == 0 || (userspace && started != 1) {
				t.Errorf("round %d: %d ups report starting the namespace:\n%s\n%s", round, started, outs[0], outs[1])
			}
			for _, o := range outs {
				switch {
				case o.Err == nil && strings.Contains(o.Stdout, "already up"):
					if p := upPID(o.Stdout); p != pid {
						t.Errorf("round %d: `up` says already up by pid %d, the winner is %d", round, p, pid)
					}
				case o.Err == nil && strings.Contains(o.Stdout, " up ("):
					// the winner
				default:
					if o.ExitCode() != 1 {
						t.Errorf("round %d: the losing up: exit %d, want 1:\n%s", round, o.ExitCode(), o)
					}
					oneLineError(t, o, "another vpn-agent")
				}
			}
			s.mustTunnel(t, 5*time.Second, fmt.Sprintf("round %d: after two ups raced", round))
			if healthy, _, st, out := waitHealthy(s, 5*time.Second); !healthy {
				t.Errorf("round %d: the winner is not healthy after the race: %v\n%s", round, st["problems"], out.Stdout)
			} else if ap, _ := st["agentPid"].(float64); userspace && int(ap) != pid {
				t.Errorf("round %d: status names agent pid %v, the winner is %d", round, st["agentPid"], pid)
			}
			if userspace {
				if pids := agentPIDs(s.path); len(pids) != 1 {
					t.Errorf("round %d: %d agents run for the namespace (%v), want 1", round, len(pids), pids)
				}
				for _, f := range []string{"state.json", "agent.log"} {
					if p := filepath.Join(names.StateDir(s.name), f); !exists(p) {
						lost = append(lost, fmt.Sprintf("round %d: %s", round, p))
					}
				}
			}
			assertNoReach(t, w, fmt.Sprintf("round %d: after two ups raced", round))
			s.ag.MustCmd(t, "down", s.name)
			assertNothingLeft(t, s, fmt.Sprintf("round %d: after down", round))
		}
		t.Run("winner-files-kept", func(t *testing.T) {
			if len(lost) > 0 {
				t.Errorf("the losing `up` removed the winner's runtime files (cli.cleanFailedStart removes /run/vpn-confinement/NAME while the winner has not written state.json yet; both ups share and truncate agent.log): %s",
					strings.Join(lost, "; "))
			}
		})
	})
	closeClean(t, w, s)
	recordFault(t, "two agents for one namespace at once (run+run, 3x up+up): one wins, the other fails with one line naming the other vpn-agent or reports it up; the winner stays healthy")
}

// TestFaultStaleLeftovers starts `run` over what an earlier crash (or a
// hand) left: a namespace with that name (with an escape route of its
// own), a host-link veth, the tunnel's interface name taken in the host
// namespace, stale runtime and resolver files, a SIGKILLed agent's
// namespace. Each time the agent must adopt or replace it, and the
// namespace must be healthy and leak-free.
func TestFaultStaleLeftovers(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	tp := s.tp
	id := tp.ID
	stray := "sx-" + id // the host end of a foreign veth into the stale namespace (named for cleanup)
	// Objects made by hand, not by vpn-agent, are taken over only with
	// --adopt (ownership_test.go: without it, run refuses them).
	cases := []struct {
		name  string
		adopt bool
		setup func(t *testing.T)
		check func(t *testing.T, w *window)
	}{
		{
			name:  "precreated-netns-with-escape-route",
			adopt: true,
			setup: func(t *testing.T) {
				for _, args := range [][]string{
					{"ip", "netns", "add", s.name},
					{"ip", "-n", tp.Host, "link", "add", stray, "type", "veth", "peer", "name", "eth9", "netns", s.name},
					{"ip", "-n", tp.Host, "addr", "add", "10.99.0.1/24", "dev", stray},
					{"ip", "-n", tp.Host, "link", "set", stray, "up"},
					{"ip", "-n", s.name, "addr", "add", "10.99.0.2/24", "dev", "eth9"},
					{"ip", "-n", s.name, "link", "set", "eth9", "up"},
					{"ip", "-n", s.name, "link", "set", "lo", "up"},
					{"ip", "-n", s.name, "route", "add", "default", "via", "10.99.0.1"},
				} {
					if out, err := execOut(args[0], args[1:]...); err != nil {
						t.Fatalf("%v: %v: %s", args, err, out)
					}
				}
				// Positive control: before the agent, this namespace's
				// escape route reaches the internet decoy (the host
				// forwards and masquerades).
				r := harness.Eventually(3*time.Second, func() probe.Result { return probe.TCP(s.name, harness.AP(testbed.DecoyTarget4, 80)) })
				if !r.Reached() {
					t.Fatalf("positive control: the stale namespace's escape route does not work before the agent: %v", r)
				}
			},
			check: func(t *testing.T, w *window) {
				// The foreign link stays (not ours), but carries nothing.
				o := observe.Start(t, tp.Host, stray, nil)
				assertNoReach(t, w, "stale namespace with an escape route")
				m := harness.Marker("control")
				probe.UDPSend(tp.Host, harness.AP(netip.MustParseAddr("10.99.0.2"), testbed.ControlPort), m)
				if !o.WaitFor(observe.Payload(m), observe.ControlWait) {
					t.Errorf("positive control: the capture on %s saw nothing", stray)
				}
				if bad := harness.Unexpected(o.Stop(), observe.LinkNoise, observe.Payload(m)); len(bad) > 0 {
					t.Errorf("LEAK: the stale namespace's own veth carried:\n%s", observe.Dump(bad))
				}
			},
		},
		{
			name:  "stale-host-link",
			adopt: true,
			setup: func(t *testing.T) {
				tp.Exec(t, tp.Host, "ip", "link", "add", names.HostVeth(s.name), "type", "veth", "peer", "name", names.NSVeth(s.name))
				tp.Exec(t, tp.Host, "ip", "addr", "add", testbed.HostLinkHost.String(), "dev", names.HostVeth(s.name))
				tp.Exec(t, tp.Host, "ip", "link", "set", names.HostVeth(s.name), "up")
			},
			check: func(t *testing.T, w *window) {
				if r := inboundAllowed(s); !r.Reached() {
					t.Errorf("the published port does not work over the replaced host link: %v", r)
				}
				assertNoReach(t, w, "stale host link")
			},
		},
		{
			// What a kernel-backend agent SIGKILLed between creating its
			// interface in the host namespace and moving it into the
			// namespace (wireguard.createKernel) leaves: a WireGuard link
			// named vc-NAME in the host namespace. Without the kernel
			// module, a persistent TUN of that name stands in for it.
			name:  "tunnel-name-taken-in-host-namespace",
			adopt: true,
			setup: func(t *testing.T) {
				if _, err := harness.Output(tp.Host, "ip", "link", "add", names.Tunnel(s.name), "type", "wireguard"); err != nil {
					tp.Exec(t, tp.Host, "ip", "tuntap", "add", "dev", names.Tunnel(s.name), "mode", "tun")
				}
			},
			check: func(t *testing.T, w *window) { assertNoReach(t, w, "stale tunnel name") },
		},
		{
			name: "stale-runtime-and-resolver-files",
			setup: func(t *testing.T) {
				dir := names.StateDir(s.name)
				must(t, os.MkdirAll(dir, 0o755))
				must(t, os.WriteFile(names.StateFile(s.name), []byte(fmt.Sprintf(
					`{"name":%q,"backend":"userspace","interface":"vc-%s","pid":999999,"dns":["203.0.113.53"],"ipv6":true,"started":"2020-01-01T00:00:00Z"}`,
					s.name, s.name)), 0o644))
				must(t, os.WriteFile(names.Lock(s.name), []byte("999999\n"), 0o600))
				must(t, os.MkdirAll(names.ResolverDir(s.name), 0o755))
				must(t, os.WriteFile(names.ResolvConf(s.name), []byte("nameserver 203.0.113.53\n"), 0o644))
				deadSocket(t, names.UAPISocket(names.Tunnel(s.name)))
			},
			check: func(t *testing.T, w *window) {
				rc, err := os.ReadFile(names.ResolvConf(s.name))
				if err != nil || strings.Contains(string(rc), "203.0.113.53") || !strings.Contains(string(rc), "nameserver "+testbed.ProvTunnel4.String()) {
					t.Errorf("resolv.conf was not rewritten to the configured resolver (err %v):\n%s", err, rc)
				}
				if r := s.getent(true, 4*time.Second); !goodPositive(s, &mrow{kind: kGetent}, r) {
					t.Errorf("getent through vpn-agent exec: %v", r)
				}
				assertNoReach(t, w, "stale runtime files")
			},
		},
		{
			name: "sigkilled-agent",
			setup: func(t *testing.T) {
				d := s.ag.Run(t, s.path)
				s.mustTunnel(t, 5*time.Second, "before the crash")
				d.Kill()
			},
			check: func(t *testing.T, w *window) { assertNoReach(t, w, "after a crash") },
		},
	}
	var done []string
	for _, c := range cases {
		ok := t.Run(c.name, func(t *testing.T) {
			c.setup(t)
			w := s.open(t, "stale "+c.name)
			var extra []string
			if c.adopt {
				extra = append(extra, "--adopt")
			}
			d, err := s.ag.Start(s.path, extra...)
			if err != nil {
				closeClean(t, w, s)
				t.Fatalf("`run` over %s: %v", c.name, err)
			}
			w.reopenVeth() // the agent (re-)created the host link
			s.serve(t)
			defer func() {
				if err := d.Stop(); err != nil {
					t.Errorf("vpn-agent run: %v", err)
				}
				assertNothingLeft(t, s, "after "+c.name+" and SIGTERM")
			}()
			s.mustTunnel(t, 10*time.Second, "run over "+c.name)
			if healthy, _, st, out := waitHealthy(s, 5*time.Second); !healthy {
				t.Errorf("status not healthy after adopting %s: %v\n%s", c.name, st["problems"], out.Stdout)
			}
			c.check(t, w)
			closeClean(t, w, s)
		})
		if !ok {
			// Leave a clean slate for the next case.
			s.ag.Cmd("down", s.name)
			execOut("ip", "-n", tp.Host, "link", "del", names.Tunnel(s.name))
			execOut("ip", "-n", tp.Host, "link", "del", names.HostVeth(s.name))
			done = append(done, c.name+":FAIL")
		} else {
			done = append(done, c.name+":ok")
		}
	}
	recordFault(t, "run over leftovers of a crash: "+strings.Join(done, " "))
}

// deadSocket leaves a Unix socket file nobody listens on at path.
func deadSocket(t *testing.T, path string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	must(t, err)
	defer syscall.Close(fd)
	must(t, syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}))
}

// TestFaultEndpointFlapping blocks and unblocks the provider's WireGuard
// port in a loop while a stream of datagrams runs through the tunnel and
// the negative probes run back to back: nothing leaks, the flapping bites
// (datagrams are lost while blocked), traffic flows between the blocks,
// and the tunnel recovers afterwards with the same agent.
func TestFaultEndpointFlapping(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	d := s.run(t)
	s.mustTunnel(t, 5*time.Second, "before flapping")
	w := s.open(t, "endpoint flapping")

	// The stream: one UDP socket in the namespace, a numbered datagram
	// every 50 ms to the provider's echo through the tunnel.
	sock := dialEcho(t, s.name)
	var mu sync.Mutex
	echoed := map[int]bool{}
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				return
			}
			if seq, err := strconv.Atoi(strings.TrimPrefix(string(buf[:n]), "vpnc-e2e-flap-")); err == nil {
				mu.Lock()
				echoed[seq] = true
				mu.Unlock()
			}
		}
	}()
	sent := 0
	stopStream := harness.Repeat(50*time.Millisecond, func() {
		sock.Write([]byte(fmt.Sprintf("vpnc-e2e-flap-%d", sent)))
		sent++
	})
	rows := negRows()
	stopRounds := harness.Repeat(0, func() { w.round(rows) })
	const cycles = 6
	for range cycles {
		s.tp.BlockWG(t)
		time.Sleep(500 * time.Millisecond)
		s.tp.UnblockWG(t)
		time.Sleep(700 * time.Millisecond)
	}
	stopStream()
	stopRounds()
	start := time.Now()
	s.mustTunnel(t, 15*time.Second, "after the flapping stopped")
	recovered := time.Since(start)
	w.mu.Lock()
	for id, res := range w.results {
		for _, x := range res {
			if x.Reached() {
				t.Errorf("while flapping: LEAK: %s reached its target: %v", id, x)
			}
		}
	}
	rounds := w.rounds
	w.mu.Unlock()
	closeClean(t, w, s)
	mu.Lock()
	got := len(echoed)
	mu.Unlock()
	if got == sent {
		t.Errorf("positive control: all %d datagrams came back; the flapping did not bite", sent)
	}
	if got == 0 {
		t.Errorf("no datagram came back between the blocks (%d sent)", sent)
	}
	if d.Exited() {
		t.Errorf("the agent exited during the flapping:\n%s", d.Output())
	}
	if healthy, _, st, out := waitHealthy(s, 5*time.Second); !healthy {
		t.Errorf("status after the flapping: %v\n%s", st["problems"], out.Stdout)
	}
	recordFault(t, fmt.Sprintf("provider UDP port flapping (%d x blocked 500ms / open 700ms) under a 20/s datagram stream: %d of %d echoed, the rest lost while blocked; %d leak-probe rounds, 0 leaks; tunnel back %v after the last unblock, same agent",
		cycles, got, sent, rounds, recovered.Round(10*time.Millisecond)))
}
