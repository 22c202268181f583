package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample takes one sample of w in mode m.
func (r *runner) sample(ctx context.Context, w Workload, m Mode, round int) Sample {
	r.seq++
	s := Sample{Workload: w.Name, Kind: w.Kind, Mode: m, Round: round, Seq: r.seq, Start: time.Now().UTC()}
	var err error
	if err = r.setPolicy(m); err == nil {
		r.warm(ctx, m)
		switch w.Kind {
		case KindTCP, KindUDP:
			err = r.loadSample(ctx, w, m, &s)
		case KindPing:
			err = r.pingSample(ctx, m, &s)
		case KindRR:
			err = r.rrSample(ctx, m, &s)
		}
	}
	if err != nil {
		s.Error = err.Error()
		r.o.Log.Warn("sample failed", "workload", w.Name, "mode", m, "round", round, "err", err)
	}
	ns := r.t.C
	if m == ModeUnbounded || m == ModeSidecar {
		ns = r.t.nsOf(m) // its own agent's table
	}
	s.NFT = nftSnapshot(ns)
	r.modeNFT[m] = s.NFT
	return s
}

// setPolicy loads the kill switch in the main agent's namespace for
// tunnel+policy and removes it for the modes measured there without it
// (tunnel, tunnel-again, the references); direct mode and the unbounded
// agent's namespace, which keeps its own table, leave it as it is.
func (r *runner) setPolicy(m Mode) error {
	switch {
	case m == ModePolicy:
		return r.pol.set(true)
	case offPolicy(m):
		return r.pol.set(false)
	}
	return nil
}

// offPolicy reports whether mode m runs in the main agent's namespace
// with its kill switch removed.
func offPolicy(m Mode) bool {
	return m == ModeTunnel || m == ModeControl || slices.Contains(refModes, m)
}

// warm sends one untimed ping so that a tunnel idle for minutes (keys
// expire after 180 s) has its handshake done before measuring starts.
func (r *runner) warm(ctx context.Context, m Mode) {
	p, err := openPinger(r.t.thread(m), target(m))
	if err != nil {
		return
	}
	defer p.Close()
	for range 3 {
		if _, ok := p.pingOnce(ctx, time.Second); ok {
			return
		}
	}
}

// tracked returns the pids whose CPU a sample in mode m records: the
// provider's peer and the mode's data plane (its vpn-agent or stock
// wireguard-go process; 0 in direct mode).
func (r *runner) tracked(m Mode) (peer, dp int) {
	if r.peer != nil {
		peer = r.peer.pid
	}
	if a := r.agents[m]; a != nil && isAgentMode(m) {
		dp = a.pid()
	}
	if ref := r.refs[m]; ref != nil {
		dp = ref.pid
	}
	return peer, dp
}

// loadSample runs one iperf3 load against a fresh server, with the ping
// prober running from the same namespace after the warm-up.
func (r *runner) loadSample(ctx context.Context, w Workload, m Mode, s *Sample) error {
	o, t := r.o, r.t
	th, dst := t.thread(m), target(m)
	srv, err := startProc(t.prov, o.Iperf3, "-s", "-1", "-p", strconv.Itoa(iperfPort))
	if err != nil {
		return err
	}
	defer srv.kill()
	if err := waitListen(srv.pid(), iperfPort, srv.done, 5*time.Second); err != nil {
		return fmt.Errorf("iperf3 server: %w: %s", err, srv.stderr.String())
	}
	pinger, err := openPinger(th, dst)
	if err != nil {
		return err
	}
	defer pinger.Close()
	peer, dp := r.tracked(m)
	r.resetHWM(s, peer, dp)
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	lat := make(chan *Latency, 1)
	go func() { lat <- pinger.run(probeCtx, o.Omit, o.PingInterval) }()

	args := iperfClientArgs(dst, iperfPort, w.Load, int(o.Duration/time.Second), int(o.Omit/time.Second), o.UDPRate, o.UDPLen)
	before := takeCPU(peer, dp)
	cli, err := startProc(th, o.Iperf3, args...)
	if err != nil {
		return err
	}
	cliErr := waitCtx(ctx, cli, o.Duration+o.Omit+30*time.Second)
	after := takeCPU(peer, dp)
	stopProbe()
	s.PingLoaded = <-lat
	srvErr := srv.wait(5 * time.Second)
	r.readHWM(s, m, peer, dp)

	raw := bytes.TrimSpace(cli.stdout.Bytes())
	if len(raw) > 0 && json.Valid(raw) {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			s.Raw = buf.Bytes()
		}
	}
	ir, perr := ParseIperf3(raw)
	if perr != nil {
		return fmt.Errorf("iperf3 client: %v (exit: %v; stderr: %s)", perr, cliErr, strings.TrimSpace(cli.stderr.String()))
	}
	if srvErr != nil {
		r.o.Log.Debug("iperf3 server", "err", srvErr)
	}
	s.Iperf = ir
	s.CPU = cpuOf(before, after, peer, dp, m)
	s.CPU.ClientSec, s.CPU.ServerSec = cli.cpuSec(), srv.cpuSec()
	s.CPU.perGB(float64(ir.MovedBytes) / 1e9)
	s.CPU.other()
	return nil
}

// waitCtx waits for p like p.wait, but kills it at once if ctx ends.
func waitCtx(ctx context.Context, p *proc, timeout time.Duration) error {
	select {
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s: killed after %s", p.cmd.Path, timeout)
	}
}

// pingSample pings with no load for the sample duration.
func (r *runner) pingSample(ctx context.Context, m Mode, s *Sample) error {
	p, err := openPinger(r.t.thread(m), target(m))
	if err != nil {
		return err
	}
	defer p.Close()
	peer, dp := r.tracked(m)
	r.resetHWM(s, peer, dp)
	before := takeCPU(peer, dp)
	pctx, cancel := context.WithTimeout(ctx, r.o.Duration)
	defer cancel()
	// Idle pings go at half the loaded interval, never faster than 10 ms.
	iv := max(r.o.PingInterval/2, 10*time.Millisecond)
	s.Ping = p.run(pctx, 0, iv)
	s.CPU = cpuOf(before, takeCPU(peer, dp), peer, dp, m)
	s.CPU.other()
	r.readHWM(s, m, peer, dp)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.Ping.Received == 0 {
		return fmt.Errorf("ping %s: no replies", target(m))
	}
	return nil
}

// rrSample runs the request/response probe (warm-up, then duration).
func (r *runner) rrSample(ctx context.Context, m Mode, s *Sample) error {
	peer, dp := r.tracked(m)
	r.resetHWM(s, peer, dp)
	before := takeCPU(peer, dp)
	rr, err := runRR(ctx, r.t.thread(m), target(m), r.o.Omit, r.o.Duration)
	s.CPU = cpuOf(before, takeCPU(peer, dp), peer, dp, m)
	s.CPU.other()
	r.readHWM(s, m, peer, dp)
	s.RR = rr
	return err
}

// resetHWM resets the peak RSS of the bench and the processes tracked
// and records the data plane's RSS at that moment.
func (r *runner) resetHWM(s *Sample, peer, dp int) {
	for _, p := range []int{os.Getpid(), peer, dp} {
		if p > 0 {
			resetHWM(p)
		}
	}
	if dp > 0 {
		s.DataplaneRSSStart = vmRSS(dp)
	}
}

// readHWM records the peaks since resetHWM: the data plane's as the
// agent's (agent modes) or the reference's.
func (r *runner) readHWM(s *Sample, m Mode, peer, dp int) {
	s.BenchHWM = vmHWM(os.Getpid())
	if peer > 0 {
		s.PeerHWM = vmHWM(peer)
	}
	switch {
	case dp <= 0:
	case isAgentMode(m):
		s.AgentHWM = vmHWM(dp)
	default:
		s.RefHWM = vmHWM(dp)
	}
}

// cpuOf turns two snapshots into a CPU record.
func cpuOf(a, b cpuSnap, peer, dp int, m Mode) *CPU {
	c := &CPU{WallSec: b.at.Sub(a.at).Seconds(), BenchSec: (b.self - a.self).Seconds()}
	if capacity := c.WallSec * float64(b.cpus); capacity > 0 && b.notBusy >= a.notBusy {
		c.MachineBusySec = max(capacity-float64(b.notBusy-a.notBusy)/procStatTicks, 0)
		c.MachineUtilPct = 100 * c.MachineBusySec / capacity
	}
	c.PeerSec = procDelta(a, b, peer)
	switch {
	case dp <= 0:
	case isAgentMode(m):
		c.AgentSec = procDelta(a, b, dp)
		c.DataplaneSec = c.AgentSec
	default:
		c.ReferenceSec = procDelta(a, b, dp)
		c.DataplaneSec = c.ReferenceSec
	}
	return c
}

// tracked is the CPU of every process the bench follows.
func (c *CPU) tracked() float64 {
	t := c.BenchSec + c.ClientSec + c.ServerSec
	for _, p := range []*float64{c.PeerSec, c.AgentSec, c.ReferenceSec} {
		if p != nil {
			t += *p
		}
	}
	return t
}

// other fills OtherSec: machine CPU outside the tracked processes.
func (c *CPU) other() { c.OtherSec = c.MachineBusySec - c.tracked() }

// perGB fills the CPU-seconds per GB figures.
func (c *CPU) perGB(gb float64) {
	c.MovedGB = gb
	if gb <= 0 {
		return
	}
	procs := c.tracked()
	c.MachinePerGB = c.MachineBusySec / gb
	c.ProcessesPerGB = procs / gb
	if c.DataplaneSec != nil {
		c.DataplanePerGB = *c.DataplaneSec / gb
	}
}
