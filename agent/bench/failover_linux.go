package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Failover timing parameters.
const (
	foStreamPeriod  = 100 * time.Millisecond // the traffic stream: one TCP echo started per period
	foEchoTimeout   = 250 * time.Millisecond // one echo attempt (connect, write, read back)
	foStreamThreads = 4                      // echo attempts in flight at most (each dials on its own namespace thread)
	foPoll          = 50 * time.Millisecond  // state file polling
	foTrafficWindow = 60 * time.Second       // a traffic sample's limit after the death
	foReadyTimeout  = 20 * time.Second
)

const foMethod = "Two WireGuard providers (the testbed's pool: userspace wireguard-go helper processes, each in its own namespace " +
	"behind a simulated internet) both answer TCP echo on one tunnel-side address (testbed.PoolProbe4); they share the client's key " +
	"and tunnel address (one key and one address for the pool, as Mullvad's), so the agent can keep the second warm. Per sample a fresh " +
	"`vpn-agent run` with wireguard.configFiles [A, B] and health.standby on or off is started in the simulated host's namespace, " +
	"with fresh providers; once a TCP echo through the tunnel succeeds, the state file says healthy and (standby on) names B a warm " +
	"standby or (standby off) none with the reason off, provider A's WireGuard UDP is dropped in both directions (nftables in its " +
	"namespace: the server vanishes, no ICMP) at t0. Detect: t0 to the agent's first dead verdict (the state file's deadAt); switch: " +
	"deadAt to the agent's switch to B (switchedAt; without a standby it includes the retry of A); first packet: switchedAt to the first " +
	"TCP echo (connect, write, read back; 250 ms per attempt) from the confined namespace that succeeds after it; total: t0 to that " +
	"echo. An agent that does not record deadAt/switchedAt is timed by polling its state file every 50 ms (timing \"poll\"). " +
	"Streaming scenarios start an echo every 100 ms throughout (up to 4 in flight, each on its own thread in the namespace); the probe " +
	"and idle scenarios start them only after detection, so the probe alone decides. Cells with the standby on and off alternate " +
	"which runs first from round to round (A/B in one run). Then A is unblocked and the agent stopped (SIGTERM)."

// foLab is the failover workload's own topology: the testbed's (host,
// internet, provider namespaces) with a second provider.
type foLab struct {
	tp         *testbed.Topology
	p2         *testbed.Provider2
	provA      *peerProc
	provB      *peerProc
	dir        string
	fileA      string
	fileB      string
	name       string // the agent's namespace
	backend    config.Backend
	agent      *Binary
	log        *slog.Logger
	probeEvery time.Duration
}

// failover measures the failover scenarios. It builds and removes its own
// topology; its namespaces are named after a testbed ID ("vt...").
func (r *runner) failover(ctx context.Context) (*Failover, error) {
	o := r.o
	f := &Failover{
		Agent:  "vpn-agent run as its own process (" + r.agentBin.Path + ": " + r.agentBin.Source + "), " + string(r.backend) + " backend",
		Method: foMethod,
	}
	lab, err := newFOLab(r.t.Dir, r.backend, r.agentBin, o.FailoverProbe, o.Log)
	if err != nil {
		f.Skipped = "could not build the pool: " + err.Error()
		return f, fmt.Errorf("failover: %w", err)
	}
	defer lab.close()
	f.Topology = lab.tp.ID
	if o.FailoverShaping != "" {
		desc, err := lab.shape(o.TC, o.FailoverShaping)
		if err != nil {
			f.Skipped = err.Error()
			o.Log.Warn("failover skipped", "reason", f.Skipped)
			return f, nil
		}
		f.Shaping = desc
	}
	o.Log.Info("failover topology", "id", lab.tp.ID, "scenarios", o.FailoverScenarios, "samples", o.FailoverSamples, "standby", o.FailoverStandby, "shaping", f.Shaping)
	agents := []bool{false}
	var agentB *Binary
	if o.FailoverAgentB != "" {
		agentB, agents = agentBinary(o.FailoverAgentB, "--failover-agent-b"), []bool{false, true}
	}
	for _, name := range o.FailoverScenarios {
		type key struct {
			standby string
			b       bool
		}
		cells := map[key]*FOScenario{}
		for _, b := range agents {
			for _, sb := range standbyOrder(o.FailoverStandby, 0) {
				sc := foCell(o, name, sb)
				if b {
					sc.AgentB, sc.AgentBinary = true, agentB
				}
				cells[key{sb, b}] = sc
				f.Scenarios = append(f.Scenarios, sc)
			}
		}
		for round := range o.FailoverSamples {
			for i := range agents {
				// The agents alternate too: A first in even rounds.
				b := agents[(i+round)%len(agents)]
				for _, sb := range standbyOrder(o.FailoverStandby, round) {
					if err := ctx.Err(); err != nil {
						return f, err
					}
					sc := cells[key{sb, b}]
					bin := lab.agent
					if b {
						bin = agentB
					}
					s, err := lab.sample(ctx, sc, bin, round)
					sc.Samples = append(sc.Samples, s)
					sc.summarize()
					line := fmt.Sprintf("detect %6.2f  switch %6.2f  first packet %6.2f  total %6.2f s  server %d  timing %s  (%s)",
						s.DetectSec, s.SwitchSec, s.FirstPacketSec, s.ResumeSec, s.ServerAfter, s.Timing, s.Cause)
					if s.Error != "" {
						line = "FAILED: " + s.Error
					}
					fmt.Fprintf(o.Progress, "[failover] %-36s round %d/%d  %s\n", sc.Cell(), round+1, o.FailoverSamples, line)
					if err != nil { // the lab is no longer usable
						return f, fmt.Errorf("failover %s round %d: %w", sc.Cell(), round+1, err)
					}
				}
			}
		}
	}
	return f, nil
}

// foCell describes a scenario's cell with the standby on or off.
func foCell(o *Options, name, standby string) *FOScenario {
	sc := &FOScenario{Name: name, Standby: standby}
	stream := float64(foStreamPeriod) / 1e6
	switch name {
	case FOTraffic:
		sc.Description = "a TCP echo stream through the tunnel (one per 100 ms), no health.probe: WireGuard's timers decide"
		sc.StreamIntervalMs = stream
	case FOProbe:
		sc.Description = "health.probe (TCP connect to the pool's echo address) with the default failures, no traffic until detection"
		sc.ProbeIntervalSec, sc.ProbeFailures = o.FailoverProbe.Seconds(), config.DefaultProbeFailures
	case FOIdle:
		sc.Description = "no health.probe configured: the default probe (a DNS query to each server's first resolver, every 30 s, 3 failures), " +
			"no traffic until detection; the death at a random point of the probe's interval"
		sc.ProbeIntervalSec, sc.ProbeFailures = config.DefaultProbeInterval.Seconds(), config.DefaultProbeFailures
	case FOStreamProbe:
		sc.Description = "a TCP echo stream (one per 100 ms) throughout and health.probe (TCP connect to the pool's echo address) with the default failures; " +
			"the death at a random point of the probe's interval"
		sc.StreamIntervalMs = stream
		sc.ProbeIntervalSec, sc.ProbeFailures = o.FailoverStreamProbe.Seconds(), config.DefaultProbeFailures
	case FOStreamFast:
		sc.Description = "a TCP echo stream (one per 100 ms) throughout and health.fast (probe every 1 s, 2 failures, 0.5 s timeout) on the pool's echo address; " +
			"the death at a random point of the probe's interval"
		sc.StreamIntervalMs, sc.Fast = stream, true
		sc.ProbeIntervalSec, sc.ProbeFailures = config.FastProbeInterval.Seconds(), config.FastProbeFailures
	}
	return sc
}

// shape puts netem (a scenario of shaping_linux.go's list) on both ends
// of the simulated host's uplink, which carries the tunnel to both
// providers. An error says why it cannot (no tc, no sch_netem): the
// failover is then skipped, never run unshaped or emulated otherwise.
func (l *foLab) shape(tc, name string) (string, error) {
	sc, ok := shapingByName(name)
	if !ok {
		return "", fmt.Errorf("--failover-shaping: unknown scenario %q", name)
	}
	if tc == "" {
		return "", fmt.Errorf("failover under netem %s skipped: tc not found on PATH", name)
	}
	for _, e := range []struct{ ns, dev string }{{l.tp.Host, testbed.HostUplinkIf}, {l.tp.Inet, testbed.InetHostIf}} {
		out, err := exec.Command(tc, append([]string{"-n", e.ns, "qdisc", "replace", "dev", e.dev, "root", "netem"}, sc.netem...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("failover under netem %s skipped: sch_netem unavailable on this kernel (%s: %v), not emulated", name, strings.Join(strings.Fields(string(out)), " "), err)
		}
	}
	return fmt.Sprintf("%s: netem %s on both ends of the simulated host's uplink (the tunnel to both providers)", name, sc.desc), nil
}

func newFOLab(parent string, backend config.Backend, agent *Binary, probe time.Duration, log *slog.Logger) (l *foLab, err error) {
	tp, err := testbed.BuildTopology()
	if err != nil {
		return nil, err
	}
	l = &foLab{tp: tp, backend: backend, agent: agent, log: log, probeEvery: probe, name: tp.Name(testbed.RoleConfined)}
	defer func() {
		if err != nil {
			l.close()
			l = nil
		}
	}()
	if l.dir, err = os.MkdirTemp(parent, "failover-"); err != nil {
		return l, err
	}
	if l.p2, err = tp.AddProvider2(); err != nil {
		return l, err
	}
	// One client key and address for the pool: a warm standby can
	// share the device (health.standby decides whether it is kept).
	l.p2.ShareClient()
	l.fileA, l.fileB = filepath.Join(l.dir, "a.conf"), filepath.Join(l.dir, "b.conf")
	a := testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.ProvTunnel4, tp.ProvKey, netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort).String())
	b := testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.Prov2Tunnel4, l.p2.ProvKey, netip.AddrPortFrom(testbed.Endpoint2, testbed.WGPort).String())
	for p, s := range map[string]string{l.fileA: a, l.fileB: b} {
		if err = os.WriteFile(p, []byte(s), 0o600); err != nil {
			return l, err
		}
	}
	return l, nil
}

// startProviders starts both providers, fresh: a provider that kept the
// previous agent's session sometimes never answered the next agent's
// handshakes (see BENCHMARKS.md, Failover), so every sample gets new
// processes.
func (l *foLab) startProviders() (err error) {
	l.stopProviders()
	start := func(ns string) func(*exec.Cmd) error {
		return func(cmd *exec.Cmd) error { return testbed.Start(ns, cmd) }
	}
	if l.provA, err = spawnPeer(start(l.tp.Prov), filepath.Join(l.dir, "provA.log"), l.tp.PoolProviderConfig("")); err != nil {
		return fmt.Errorf("provider A: %w", err)
	}
	if l.provB, err = spawnPeer(start(l.p2.NS), filepath.Join(l.dir, "provB.log"), l.p2.Config("")); err != nil {
		return fmt.Errorf("provider B: %w", err)
	}
	return nil
}

func (l *foLab) stopProviders() {
	for _, p := range []*peerProc{l.provA, l.provB} {
		if p != nil {
			p.stop()
		}
	}
	l.provA, l.provB = nil, nil
}

// close stops the providers and removes the topology (namespaces, links,
// runtime files named after its ID) and the lab's files.
func (l *foLab) close() {
	l.stopProviders()
	if err := l.tp.Close(); err != nil {
		l.log.Warn("failover topology cleanup incomplete", "err", err)
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// config writes the agent's config for a scenario and returns its path.
func (l *foLab) config(sc *FOScenario) (string, error) {
	c := &config.Config{Name: l.name, Backend: string(l.backend), IPv6: "block"}
	c.WireGuard.ConfigFiles = []string{l.fileA, l.fileB}
	standby := sc.Standby != StandbyOff
	c.Health.Standby = &standby
	echo := netip.AddrPortFrom(testbed.PoolProbe4, testbed.EchoPort).String()
	switch sc.Name {
	case FOTraffic:
		c.Health.NoProbe = true // WireGuard's timers alone
	case FOProbe:
		c.Health.Probe = &config.Probe{Address: echo, Interval: l.probeEvery.String(), Failures: sc.ProbeFailures}
	case FOStreamProbe:
		// The default failures: none written.
		c.Health.Probe = &config.Probe{Address: echo, Interval: time.Duration(sc.ProbeIntervalSec * float64(time.Second)).String()}
	case FOStreamFast:
		c.Health.Fast = true
		c.Health.Probe = &config.Probe{Address: echo}
	}
	return l.writeConfig(sc.Name+"-standby-"+cmp.Or(sc.Standby, StandbyOn), c)
}

// writeConfig writes c as the lab's config file name.json, checked as the
// agent would load it, and returns its path.
func (l *foLab) writeConfig(name string, c *config.Config) (string, error) {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(l.dir, name+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	if _, err := config.LoadSpec(path, config.Options{}); err != nil {
		return "", fmt.Errorf("the agent rejects the bench's config %s: %w", name, err)
	}
	return path, nil
}

// dialEcho connects from th to the pool's echo address; echoOver makes
// one exchange on the connection (the connection is closed after).
func dialEcho(th *testbed.Thread) (net.Conn, error) {
	var c net.Conn
	addr := netip.AddrPortFrom(testbed.PoolProbe4, testbed.EchoPort).String()
	err := th.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, foEchoTimeout)
		return err
	})
	return c, err
}

func echoOver(c net.Conn, deadline time.Time) error {
	defer c.Close()
	c.SetDeadline(deadline)
	msg := []byte("vpn-bench failover\n")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if !bytes.Equal(buf, msg) {
		return errors.New("echo: wrong answer")
	}
	return nil
}

// poolEcho is one TCP echo from th to the pool's echo address.
func poolEcho(th *testbed.Thread) error {
	start := time.Now()
	c, err := dialEcho(th)
	if err != nil {
		return err
	}
	return echoOver(c, start.Add(foEchoTimeout))
}

// stream starts an echo every period while on() holds, until close; each
// attempt dials on a namespace thread of its own (a pool of
// foStreamThreads), so that an attempt that waits for its timeout does
// not delay the next: a success is seen within a period (plus a round
// trip) of the path's working. It records each success's time.
type stream struct {
	mu       sync.Mutex
	ok       []time.Time
	attempts int
	skipped  int // periods with every thread busy
	on       func() bool
	free     chan *testbed.Thread
	threads  []*testbed.Thread
	stop     chan struct{}
	loop     sync.WaitGroup
	inFlight sync.WaitGroup
}

func startStream(ns string, on func() bool) (*stream, error) {
	s := &stream{on: on, stop: make(chan struct{}), free: make(chan *testbed.Thread, foStreamThreads)}
	for range foStreamThreads {
		th, err := testbed.StartThread(ns)
		if err != nil {
			s.closeThreads()
			return nil, err
		}
		s.threads = append(s.threads, th)
		s.free <- th
	}
	s.loop.Add(1)
	go func() {
		defer s.loop.Done()
		tick := time.NewTicker(foStreamPeriod)
		defer tick.Stop()
		for {
			if s.on() {
				s.attempt()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s, nil
}

// attempt starts one echo on a free thread (none free: the period is
// skipped, and counted).
func (s *stream) attempt() {
	var th *testbed.Thread
	select {
	case th = <-s.free:
	default:
		s.mu.Lock()
		s.skipped++
		s.mu.Unlock()
		return
	}
	s.inFlight.Add(1)
	go func() {
		defer s.inFlight.Done()
		start := time.Now()
		c, err := dialEcho(th)
		s.free <- th // the exchange needs no thread
		if err == nil {
			err = echoOver(c, start.Add(foEchoTimeout))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.attempts++
		if err == nil {
			s.ok = append(s.ok, time.Now())
		}
	}()
}

func (s *stream) close() {
	close(s.stop)
	s.loop.Wait()
	s.inFlight.Wait()
	s.closeThreads()
}

func (s *stream) closeThreads() {
	for _, th := range s.threads {
		th.Close()
	}
}

// firstAfter is the first success at or after t, the successes before
// t0 and the attempts made.
func (s *stream) firstAfter(t0, t time.Time) (time.Time, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := 0
	var first time.Time
	for _, x := range s.ok {
		if x.Before(t0) {
			before++
		}
		if !x.Before(t) && (first.IsZero() || x.Before(first)) {
			first = x
		}
	}
	return first, before, s.attempts
}

// warmSwitchLog is what the agent logs for a switch to the warm standby
// (agent/daemon).
const warmSwitchLog = "switching to the warm standby at once"

// sample runs one failover: a fresh agent on [A, B], A's WireGuard
// dropped at t0, the verdict, the switch and the first echo through B
// timed. A non-nil error means the lab cannot go on (the agent did not
// stop); a failed measurement is the sample's Error only.
func (l *foLab) sample(ctx context.Context, sc *FOScenario, agent *Binary, round int) (s FOSample, fatal error) {
	s.Round = round
	fail := func(format string, a ...any) (FOSample, error) {
		s.Error = fmt.Sprintf(format, a...)
		return s, nil
	}
	cfg, err := l.config(sc)
	if err != nil {
		return s, err
	}
	l.tp.UnblockWG() // a previous sample's block, if any (absent is fine)
	if err := l.startProviders(); err != nil {
		return s, err
	}
	logPath := filepath.Join(l.dir, fmt.Sprintf("agent-%s-%s-%v-%d.log", sc.Name, sc.Standby, sc.AgentB, round+1))
	ag, err := startAgent(agent, l.tp.Host, logPath, "", "--config", cfg)
	if err != nil {
		return s, err
	}
	var th *testbed.Thread
	var st *stream
	defer func() {
		if st != nil {
			st.close()
		}
		if th != nil {
			th.Close()
		}
		l.tp.UnblockWG()
		if _, err := ag.stop(); err != nil && fatal == nil {
			if s.Error == "" {
				s.Error = err.Error()
			}
			if _, serr := os.Stat(names.Netns(l.name)); serr == nil {
				fatal = err // the namespace is still there: the next agent cannot start
			}
		}
		if s.Error != "" {
			s.AgentLog = ag.tailN(4000)
		}
	}()
	// Ready: the namespace exists, a TCP echo passes through server A,
	// the agent's state says healthy and its standby is as configured
	// (warm, or none: off; the A/B's control).
	deadline := time.Now().Add(foReadyTimeout)
	for {
		if _, err := engine.ReadState(l.name); err == nil {
			if th, err = testbed.StartThread(l.name); err == nil {
				break
			}
		}
		if err := ag.pause(ctx, foPoll, "before it was up"); err != nil {
			return fail("%v", err)
		}
		if time.Now().After(deadline) {
			return fail("the agent's namespace was not up within %v: %s", foReadyTimeout, ag.tail())
		}
	}
	for {
		err := poolEcho(th)
		stt, serr := engine.ReadState(l.name)
		if err == nil && serr == nil && stt.Server == 0 && stt.Liveness != nil && stt.Liveness.Recovery == "healthy" && standbyAsConfigured(sc, stt.Liveness) {
			s.StandbyBefore = standbyState(stt.Liveness)
			break
		}
		if time.Now().After(deadline) {
			sb := "none recorded"
			if stt != nil && stt.Liveness != nil {
				sb = standbyState(stt.Liveness)
			}
			return fail("before the death (standby %s wanted): echo %v, state %+v %v, standby %s: %s", sc.Standby, err, stt, serr, sb, ag.tail())
		}
		time.Sleep(foPoll)
	}
	window := foTrafficWindow
	var detected time.Time
	var mu sync.Mutex
	isDetected := func() bool { mu.Lock(); defer mu.Unlock(); return !detected.IsZero() }
	streaming := sc.StreamIntervalMs > 0
	on := isDetected
	if streaming {
		on = func() bool { return true }
	}
	if st, err = startStream(l.name, on); err != nil {
		return s, fmt.Errorf("the echo stream's threads: %w", err)
	}
	every := time.Duration(sc.ProbeIntervalSec * float64(time.Second))
	switch {
	case sc.Name == FOIdle:
		// The default probe ran at the start; an idle tunnel dies at
		// any point of its interval.
		time.Sleep(time.Second + rand.N(every))
		window = 4 * every
	case sc.Name == FOProbe:
		// Let the probe succeed on its own before the death.
		time.Sleep(every + every/2)
		window = 20 * every
	case every > 0:
		// The stream flows; the death at a random point of the probe's
		// interval.
		time.Sleep(time.Second + rand.N(every))
		window = max(window, 20*every)
	default:
		time.Sleep(time.Second)
	}
	if streaming {
		if _, before, _ := st.firstAfter(time.Now(), time.Now()); before == 0 {
			return fail("positive control: no echo of the stream passed before the death")
		}
	}
	t0 := time.Now()
	s.Start = t0.UTC()
	if err := l.tp.BlockWG(); err != nil {
		return s, fmt.Errorf("drop provider A's WireGuard: %w", err)
	}
	var polledSwitch time.Time
	for {
		now := time.Now()
		stt, serr := engine.ReadState(l.name)
		if serr == nil && stt.Liveness != nil {
			if !isDetected() && (stt.Liveness.Recovery != "healthy" || stt.Server != 0) {
				mu.Lock()
				detected = now
				mu.Unlock()
				s.Recovery, s.Cause = stt.Liveness.Recovery, stt.Liveness.Cause
			}
			if polledSwitch.IsZero() && stt.Server != 0 {
				polledSwitch = now
			}
		}
		if !polledSwitch.IsZero() {
			// The first echo completed after the switch: the agent's
			// record of it, else the poll's (less a poll period).
			from := polledSwitch.Add(-foPoll)
			if serr == nil && stt.Liveness != nil && !stt.Liveness.SwitchedAt.IsZero() {
				from = stt.Liveness.SwitchedAt
			}
			if t, before, n := st.firstAfter(t0, latest(t0, from)); !t.IsZero() {
				s.EchoesBefore, s.Attempts = before, n
				stt, err := switchRecord(ctx, l.name)
				if err != nil || stt.Liveness == nil {
					return fail("the state file after the switch: %v", err)
				}
				s.ServerAfter, s.Failovers = stt.Server, stt.Liveness.Failovers
				if s.ServerAfter != 1 {
					return fail("traffic resumed after %.2f s but the active server is %d, not the second", t.Sub(t0).Seconds(), s.ServerAfter)
				}
				if err := s.split(t0, detected, polledSwitch, t, stt.Liveness); err != nil {
					return fail("%v", err)
				}
				if b, err := os.ReadFile(logPath); err == nil {
					s.WarmSwitch = bytes.Contains(b, []byte(warmSwitchLog))
				}
				return s, nil
			}
		}
		if err := ag.pause(ctx, foPoll, "during the failover"); err != nil {
			return fail("%v", err)
		}
		if time.Since(t0) > window {
			return fail("no failover within %v of the death (detected: %v, switched: %v): %s", window, isDetected(), !polledSwitch.IsZero(), ag.tail())
		}
	}
}

// switchRecord reads the state file after a switch. The switch writes it
// twice: the engine the new server, then the failover loop its record of
// the verdict and the switch (deadAt, switchedAt); read between the two
// (1 round in 40 once), it lacks the times. Read again, every poll period
// for up to a second, until it has them; then whatever it holds (split
// falls back to the polls).
func switchRecord(ctx context.Context, name string) (*engine.State, error) {
	deadline := time.Now().Add(time.Second)
	for {
		stt, err := engine.ReadState(name)
		if err != nil || stt.Liveness == nil || (!stt.Liveness.DeadAt.IsZero() && !stt.Liveness.SwitchedAt.IsZero()) || time.Now().After(deadline) {
			return stt, err
		}
		select {
		case <-ctx.Done():
			return stt, nil
		case <-time.After(foPoll):
		}
	}
}

// split fills the sample's times: from the agent's own record of the
// verdict and the switch when it has them, else from the polls.
func (s *FOSample) split(t0, polledDetect, polledSwitch, echo time.Time, lv *engine.Liveness) error {
	s.ResumeSec = echo.Sub(t0).Seconds()
	if !lv.DeadAt.IsZero() && !lv.SwitchedAt.IsZero() {
		if lv.DeadAt.Before(t0) {
			return fmt.Errorf("the agent's verdict (deadAt %s) precedes the death (%s): a verdict of another failure", lv.DeadAt.Format(time.RFC3339Nano), t0.UTC().Format(time.RFC3339Nano))
		}
		if lv.SwitchedAt.Before(lv.DeadAt) {
			return fmt.Errorf("the agent's switch (switchedAt %s) precedes its verdict (deadAt %s)", lv.SwitchedAt.Format(time.RFC3339Nano), lv.DeadAt.Format(time.RFC3339Nano))
		}
		s.Timing = "agent"
		s.DetectSec = lv.DeadAt.Sub(t0).Seconds()
		s.SwitchSec = lv.SwitchedAt.Sub(lv.DeadAt).Seconds()
		s.FirstPacketSec = echo.Sub(lv.SwitchedAt).Seconds()
		return nil
	}
	// An agent that does not record them: the polls (every 50 ms).
	s.Timing = "poll"
	if polledDetect.IsZero() || polledDetect.After(polledSwitch) {
		polledDetect = polledSwitch
	}
	s.DetectSec = polledDetect.Sub(t0).Seconds()
	s.SwitchSec = polledSwitch.Sub(polledDetect).Seconds()
	s.FirstPacketSec = max(0, echo.Sub(polledSwitch).Seconds())
	return nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// standbyAsConfigured says the agent's standby is what the cell wants:
// warm with health.standby on, none for the reason "off" with it off.
func standbyAsConfigured(sc *FOScenario, lv *engine.Liveness) bool {
	sb := lv.Standby
	if sb == nil {
		return false
	}
	if sc.Standby == StandbyOff {
		return sb.State == "none" && sb.Why == "off"
	}
	return sb.State == "warm" && sb.Index == 1
}

func standbyState(lv *engine.Liveness) string {
	if lv.Standby == nil {
		return "not recorded"
	}
	if lv.Standby.Why != "" {
		return lv.Standby.State + " (" + lv.Standby.Why + ")"
	}
	return lv.Standby.State
}
