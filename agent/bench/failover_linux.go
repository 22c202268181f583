package bench

import (
	"bytes"
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
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Failover timing parameters.
const (
	foStreamPeriod  = 100 * time.Millisecond // the traffic stream: one TCP echo per period
	foEchoTimeout   = 250 * time.Millisecond // one echo attempt (connect, write, read back)
	foPoll          = 50 * time.Millisecond  // state file polling
	foTrafficWindow = 60 * time.Second       // a traffic sample's limit after the death
	foReadyTimeout  = 20 * time.Second
)

const foMethod = "Two WireGuard providers (the testbed's pool: userspace wireguard-go helper processes, each in its own namespace " +
	"behind a simulated internet) both answer TCP echo on one tunnel-side address (testbed.PoolProbe4). Per sample a fresh " +
	"`vpn-agent run` with wireguard.configFiles [A, B] is started in the simulated host's namespace; once a TCP echo through " +
	"the tunnel succeeds and the state file says healthy, provider A's WireGuard UDP is dropped in both directions (nftables " +
	"in its namespace: the server vanishes, no ICMP) at t0. Detection: the first poll (every 50 ms) of the agent's state " +
	"file (engine.ReadState) whose liveness is no longer \"healthy\" or whose active server is no longer A. Resumption: the " +
	"first TCP echo (connect, write, read back; 250 ms per attempt) from the confined namespace that succeeds after t0 " +
	"(traffic scenario: the stream of one attempt per 100 ms runs throughout; probe scenario: attempts start only after " +
	"detection, so the probe alone decides). Then A is unblocked and the agent stopped (SIGTERM)."

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
	o.Log.Info("failover topology", "id", lab.tp.ID, "scenarios", o.FailoverScenarios, "samples", o.FailoverSamples)
	for _, name := range o.FailoverScenarios {
		sc := &FOScenario{Name: name}
		switch name {
		case FOTraffic:
			sc.Description = "a TCP echo stream through the tunnel (one per 100 ms), no health.probe: WireGuard's timers decide"
			sc.StreamIntervalMs = float64(foStreamPeriod) / 1e6
		case FOProbe:
			sc.Description = "health.probe (TCP connect to the pool's echo address) with the default failures, no traffic until detection"
			sc.ProbeIntervalSec, sc.ProbeFailures = o.FailoverProbe.Seconds(), config.DefaultProbeFailures
		case FOIdle:
			sc.Description = "no health.probe configured: the default probe (a DNS query to each server's first resolver, every 30 s, 3 failures), " +
				"no traffic until detection; the death at a random point of the probe's interval"
			sc.ProbeIntervalSec, sc.ProbeFailures = config.DefaultProbeInterval.Seconds(), config.DefaultProbeFailures
		}
		f.Scenarios = append(f.Scenarios, sc)
		for round := range o.FailoverSamples {
			if err := ctx.Err(); err != nil {
				return f, err
			}
			s, err := lab.sample(ctx, sc, round)
			sc.Samples = append(sc.Samples, s)
			sc.summarize()
			line := fmt.Sprintf("detected %6.2f s  resumed %6.2f s  server %d  (%s)", s.DetectSec, s.ResumeSec, s.ServerAfter, s.Cause)
			if s.Error != "" {
				line = "FAILED: " + s.Error
			}
			fmt.Fprintf(o.Progress, "[failover] %-7s round %d/%d  %s\n", name, round+1, o.FailoverSamples, line)
			if err != nil { // the lab is no longer usable
				return f, fmt.Errorf("failover %s round %d: %w", name, round+1, err)
			}
		}
	}
	return f, nil
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
	l.fileA, l.fileB = filepath.Join(l.dir, "a.conf"), filepath.Join(l.dir, "b.conf")
	a := testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.ProvTunnel4, tp.ProvKey, netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort).String())
	b := testbed.WGQuick(l.p2.ClientKey, testbed.Client2Tunnel4, testbed.Prov2Tunnel4, l.p2.ProvKey, netip.AddrPortFrom(testbed.Endpoint2, testbed.WGPort).String())
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
	switch sc.Name {
	case FOTraffic:
		c.Health.NoProbe = true // WireGuard's timers alone
	case FOProbe:
		c.Health.Probe = &config.Probe{
			Address:  netip.AddrPortFrom(testbed.PoolProbe4, testbed.EchoPort).String(),
			Interval: l.probeEvery.String(), Failures: sc.ProbeFailures,
		}
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(l.dir, sc.Name+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	if _, err := config.LoadSpec(path, config.Options{}); err != nil {
		return "", fmt.Errorf("the agent rejects the bench's failover config: %w", err)
	}
	return path, nil
}

// poolEcho is one TCP echo from th to the pool's echo address.
func poolEcho(th *testbed.Thread) error {
	var c net.Conn
	addr := netip.AddrPortFrom(testbed.PoolProbe4, testbed.EchoPort).String()
	if err := th.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, foEchoTimeout)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(foEchoTimeout))
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

// stream runs echoes from th, one per period, while on() holds, until
// stop; it reports each success's time.
type stream struct {
	mu        sync.Mutex
	ok        []time.Time
	attempts  int
	on        func() bool
	stop, end chan struct{}
}

func startStream(th *testbed.Thread, on func() bool) *stream {
	s := &stream{on: on, stop: make(chan struct{}), end: make(chan struct{})}
	go func() {
		defer close(s.end)
		for {
			t := time.Now()
			if s.on() {
				err := poolEcho(th)
				s.mu.Lock()
				s.attempts++
				if err == nil {
					s.ok = append(s.ok, time.Now())
				}
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(time.Until(t.Add(foStreamPeriod))):
			}
		}
	}()
	return s
}

func (s *stream) close() { close(s.stop); <-s.end }

// firstAfter is the first success at or after t0, and the attempts made.
func (s *stream) firstAfter(t0 time.Time) (time.Time, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := 0
	for _, t := range s.ok {
		if t.Before(t0) {
			before++
			continue
		}
		return t, before, s.attempts
	}
	return time.Time{}, before, s.attempts
}

// sample runs one failover: a fresh agent on [A, B], A's WireGuard
// dropped at t0, detection and resumption timed. A non-nil error means
// the lab cannot go on (the agent did not stop); a failed measurement is
// the sample's Error only.
func (l *foLab) sample(ctx context.Context, sc *FOScenario, round int) (s FOSample, fatal error) {
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
	ag, err := startAgent(l.agent, l.tp.Host, filepath.Join(l.dir, fmt.Sprintf("agent-%s-%d.log", sc.Name, round+1)), "", "--config", cfg)
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
	// Ready: the namespace exists, a TCP echo passes through server A and
	// the agent's state says healthy.
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
		if err == nil && serr == nil && stt.Server == 0 && stt.Liveness != nil && stt.Liveness.Recovery == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			return fail("before the death: echo %v, state %+v %v: %s", err, stt, serr, ag.tail())
		}
		time.Sleep(foPoll)
	}
	window := foTrafficWindow
	var detected time.Time
	var mu sync.Mutex
	isDetected := func() bool { mu.Lock(); defer mu.Unlock(); return !detected.IsZero() }
	if sc.Name == FOIdle {
		// The default probe ran at the start; an idle tunnel dies at
		// any point of its interval.
		every := time.Duration(sc.ProbeIntervalSec * float64(time.Second))
		time.Sleep(time.Second + rand.N(every))
		window = 4 * every
		st = startStream(th, isDetected)
	} else if sc.ProbeIntervalSec > 0 {
		// Let the probe succeed on its own before the death.
		time.Sleep(l.probeEvery + l.probeEvery/2)
		window = time.Duration(20 * float64(l.probeEvery))
		st = startStream(th, isDetected)
	} else {
		st = startStream(th, func() bool { return true })
		time.Sleep(time.Second)
		if _, before, _ := st.firstAfter(time.Now()); before == 0 {
			return fail("positive control: no echo of the stream passed before the death")
		}
	}
	t0 := time.Now()
	s.Start = t0.UTC()
	if err := l.tp.BlockWG(); err != nil {
		return s, fmt.Errorf("drop provider A's WireGuard: %w", err)
	}
	for {
		now := time.Now()
		if !isDetected() {
			if stt, err := engine.ReadState(l.name); err == nil && stt.Liveness != nil && (stt.Liveness.Recovery != "healthy" || stt.Server != 0) {
				mu.Lock()
				detected = now
				mu.Unlock()
				s.DetectSec = now.Sub(t0).Seconds()
				s.Recovery, s.Cause = stt.Liveness.Recovery, stt.Liveness.Cause
			}
		}
		if isDetected() {
			if t, before, n := st.firstAfter(t0); !t.IsZero() {
				s.ResumeSec = t.Sub(t0).Seconds()
				s.EchoesBefore, s.Attempts = before, n
				if stt, err := engine.ReadState(l.name); err == nil {
					s.ServerAfter = stt.Server
					if stt.Liveness != nil {
						s.Failovers = stt.Liveness.Failovers
					}
				}
				if s.ServerAfter != 1 {
					return fail("traffic resumed after %.2f s but the active server is %d, not the second", s.ResumeSec, s.ServerAfter)
				}
				if s.ResumeSec < s.DetectSec {
					// Traffic passed before the poll saw the judgement:
					// the switch happened between two polls.
					s.DetectSec = s.ResumeSec
				}
				return s, nil
			}
		}
		if err := ag.pause(ctx, foPoll, "during the failover"); err != nil {
			return fail("%v", err)
		}
		if time.Since(t0) > window {
			return fail("no failover within %v of the death (detected: %v): %s", window, isDetected(), ag.tail())
		}
	}
}
