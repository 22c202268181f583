package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The scale workload's peer: a provider of its own (port, interface and
// addresses apart from the throughput modes'), one WireGuard peer per
// namespace.
const (
	scalePort     = peerPort + 1
	scalePeerAddr = "198.18.64.1" // its tunnel address; namespace i gets 198.18.64.2+i
	scaleStatuses = 5             // `status` of all, repeated (after a first and a second run)
	// scaleConfirmPause parts status's first run from its second: longer
	// than health.DefaultConfirmAfter, so the second confirms the records.
	scaleConfirmPause = 1200 * time.Millisecond
	// scaleIdleWindow is how long the idle agents' CPU is summed.
	scaleIdleWindow = 3 * time.Second
)

const scaleMethod = "N namespaces brought up one after another, each by its own `vpn-agent run --config` process " +
	"(default check interval) in the simulated host's namespace, against one local provider with a peer per namespace. " +
	"up: process start to READY=1 on a private NOTIFY_SOCKET, as systemd times it. Then a ping through every tunnel " +
	"(handshakes), a second's rest, each agent's VmRSS (idle), their CPU together over 3 s (idle), `vpn-agent status --json` naming all N, as its own " +
	"process: a first run, 1.2 s later a second, then 5 more (the figure; with --status-bin, the other binary's alternating, order flipped each round); then SIGTERM to each agent in reverse order, timed to its exit (teardown and the kernel's " +
	"removal of the tunnel link done)."

// scaleAddr is namespace i's tunnel address.
func scaleAddr(i int) netip.Addr {
	a := netip.MustParseAddr(scalePeerAddr).As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(1 + i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// scaleNS is namespace i's name (at most 12 characters: ID + "n" + i).
func (t *topo) scaleNS(i int) string { return fmt.Sprintf("%sn%d", t.ID, i) }

// scale runs the scale workload.
func (r *runner) scale(ctx context.Context) (*Scale, error) {
	o, t := r.o, r.t
	n := o.ScaleN
	sc := &Scale{N: n, Agent: r.agentBin.Path + " (" + r.agentBin.Source + "), " + string(r.backend) + " backend", Method: scaleMethod}
	keys := make([]wgtypes.Key, n)
	for i := range keys {
		var err error
		if keys[i], err = wgtypes.GeneratePrivateKey(); err != nil {
			return sc, err
		}
	}
	peer, err := t.startProvider(t.scalePeerConfig(r.backend == config.BackendKernel, o.MTU, keys), "scale-peer.log")
	if err != nil {
		return sc, fmt.Errorf("scale peer: %w", err)
	}
	dir := filepath.Join(t.Dir, "scale")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sc, err
	}
	agents := make([]*agentProc, 0, n)
	defer func() {
		for _, a := range agents { // what the down phase did not stop
			a.stop()
		}
		peer.stop()
	}()
	ep := fmt.Sprintf("%s:%d", underlayPeer, scalePort)
	var nsNames []string
	for i := range n {
		if err := ctx.Err(); err != nil {
			return sc, err
		}
		name := t.scaleNS(i)
		key := filepath.Join(dir, name+".key")
		if err := os.WriteFile(key, []byte(keys[i].String()+"\n"), 0o600); err != nil {
			return sc, err
		}
		cfg := filepath.Join(dir, name+".json")
		c := t.agentConfig(name, o.Backend, o.MTU, key, scaleAddr(i).String(), ep, scalePeerAddr)
		if err := writeConfig(cfg, c, ""); err != nil {
			return sc, err
		}
		a, err := startAgent(r.agentBin, t.U, filepath.Join(dir, name+".log"), filepath.Join(dir, name+".notify"), "--config", cfg)
		if err != nil {
			return sc, fmt.Errorf("scale agent %d: %w", i+1, err)
		}
		agents = append(agents, a)
		if err := a.waitReady(agentReadyTimeout); err != nil {
			return sc, fmt.Errorf("scale agent %d: %w", i+1, err)
		}
		sc.UpMs = append(sc.UpMs, ms(a.Ready))
		nsNames = append(nsNames, name)
		if (i+1)%10 == 0 || i+1 == n {
			fmt.Fprintf(o.Progress, "[scale] %d/%d up, last %.1f ms, median so far %.1f ms\n", i+1, n, ms(a.Ready), Median(sc.UpMs))
		}
	}
	sc.summarize()
	t0 := time.Now()
	for _, name := range nsNames {
		if err := pingFrom(ctx, name, scalePeerAddr); err != nil {
			return sc, fmt.Errorf("scale %s handshake: %w", name, err)
		}
	}
	sc.HandshakeSec = time.Since(t0).Seconds()
	time.Sleep(time.Second)
	for _, a := range agents {
		sc.IdleRSSKiB = append(sc.IdleRSSKiB, vmRSS(a.pid()))
		sc.IdleAnonKiB = append(sc.IdleAnonKiB, rssAnon(a.pid()))
		sc.IdlePSSKiB = append(sc.IdlePSSKiB, pss(a.pid()))
	}
	if peer.pid > 0 {
		sc.PeerRSSKiB = vmRSS(peer.pid)
	}
	sc.IdleCPU = idleCPU(agents, scaleIdleWindow)
	if err := r.scaleStatus(sc, nsNames); err != nil {
		return sc, err
	}
	for range scaleStatuses {
		d, _, _, err := runAgentCmd(r.agentBin, t.U, "status", "--json", nsNames[0])
		if err != nil {
			return sc, fmt.Errorf("scale status %s: %w", nsNames[0], err)
		}
		sc.StatusOneMs = append(sc.StatusOneMs, ms(d))
	}
	sc.summarize()
	fmt.Fprintf(o.Progress, "[scale] idle RSS %s MiB, status of all %s ms\n", fmtDist(sc.IdleRSS), fmtDist(sc.Status))
	all := time.Now()
	for i := len(agents) - 1; i >= 0; i-- {
		d, err := agents[i].stop()
		agents = agents[:i]
		if err != nil {
			return sc, fmt.Errorf("scale down %s: %w", nsNames[i], err)
		}
		sc.DownMs = append(sc.DownMs, ms(d))
	}
	sc.DownAllMs = ms(time.Since(all))
	sc.summarize()
	fmt.Fprintf(o.Progress, "[scale] down %s ms each, %.0f ms for all\n", fmtDist(sc.Down), sc.DownAllMs)
	return sc, nil
}

// scaleStatus times `vpn-agent status --json` of every namespace: the
// agent's binary and, with --status-bin, the other, alternating (the
// order flips each round). Each binary's first run, then a pause longer
// than status's record confirmation (health.DefaultConfirmAfter), its
// second, then scaleStatuses more: the steady state of a status run
// again and again.
func (r *runner) scaleStatus(sc *Scale, nsNames []string) error {
	bins := []*Binary{r.agentBin}
	if r.o.StatusBin != "" {
		bins = append(bins, agentBinary(r.o.StatusBin, "--status-bin"))
	}
	sc.StatusRuns = make([]StatusRuns, len(bins))
	for i, b := range bins {
		sc.StatusRuns[i].Bin = b.Path
	}
	if l := loadAvg(); len(l) > 0 {
		sc.StatusLoad = append(sc.StatusLoad, l[0])
	}
	for round := range scaleStatuses + 2 {
		if round == 1 {
			time.Sleep(scaleConfirmPause)
		}
		for k := range bins {
			i := k
			if round%2 == 1 {
				i = len(bins) - 1 - k
			}
			d, cpu, code, out, err := runAgentTimed(bins[i], r.t.U, append([]string{"status", "--json"}, nsNames...)...)
			if err != nil {
				return fmt.Errorf("scale status (%s): %w", bins[i].Path, err)
			}
			sr := &sc.StatusRuns[i]
			switch round {
			case 0:
				sr.FirstMs = ms(d)
			case 1:
				sr.SecondMs = ms(d)
			default:
				sr.Ms = append(sr.Ms, ms(d))
				sr.CPUMs = append(sr.CPUMs, ms(cpu))
			}
			sr.Exit = code
			sr.Healthy, _ = healthyIn(out)
			if i == 0 {
				if round > 1 {
					sc.StatusMs = append(sc.StatusMs, ms(d))
				}
				sc.StatusExit = code
				sc.Healthy, sc.Problems = healthyIn(out)
			}
		}
	}
	if l := loadAvg(); len(l) > 0 {
		sc.StatusLoad = append(sc.StatusLoad, l[0])
	}
	return nil
}

// idleCPU is the CPU the agents used together during window, in CPUs
// (CPU-seconds per second): their watchdogs' checks, with no traffic.
func idleCPU(agents []*agentProc, window time.Duration) float64 {
	var pids []int
	for _, a := range agents {
		pids = append(pids, a.pid())
	}
	before := takeCPU(pids...)
	time.Sleep(window)
	after := takeCPU(pids...)
	sum := 0.0
	for _, p := range pids {
		if d := procDelta(before, after, p); d != nil {
			sum += *d
		}
	}
	return sum / after.at.Sub(before.at).Seconds()
}

// scalePeerConfig is the scale workload's provider: one peer per key.
func (t *topo) scalePeerConfig(kernel bool, mtu int, keys []wgtypes.Key) *provider.Config {
	w := &provider.WireGuard{
		Interface: t.ID + "s", PrivateKey: t.PeerKey.String(), ListenPort: scalePort, MTU: mtu,
		Kernel: kernel, NoIPv6: true, Addresses: []string{scalePeerAddr + "/32"},
	}
	for i, k := range keys {
		a := scaleAddr(i).String() + "/32"
		w.Peers = append(w.Peers, provider.Peer{PublicKey: k.PublicKey().String(), AllowedIPs: []string{a}})
		w.Routes = append(w.Routes, provider.Route{Dst: a, Src: scalePeerAddr})
	}
	// Its resolver answers the agents' default liveness probe (a query
	// through each tunnel every 30 s): without it every tunnel is judged
	// dead within a minute and each agent keeps reconnecting, which is
	// not the idle fleet this workload measures.
	return &provider.Config{Log: filepath.Join(t.Dir, "scale-peer-events.log"), WireGuard: w, DNS: []string{scalePeerAddr + ":53"}}
}

// pingFrom pings addr from namespace ns until a reply (at most 10 s).
func pingFrom(ctx context.Context, ns, addr string) error {
	th, err := testbed.StartThread(ns)
	if err != nil {
		return err
	}
	defer th.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return waitPing(ctx, th, addr)
}

// runAgentCmd runs the agent binary with args in namespace ns ("": the
// bench's own) as its own process and times it: its exit code and stdout.
// err is set when it could not run, was killed (after 30 s) or exited 2
// (bad input: its message).
func runAgentCmd(bin *Binary, ns string, args ...string) (time.Duration, int, []byte, error) {
	d, _, code, out, err := runAgentTimed(bin, ns, args...)
	return d, code, out, err
}

// runAgentTimed is runAgentCmd that also returns the CPU time (user and
// system) the process used: a figure the machine's other load inflates
// far less than the wall time.
func runAgentTimed(bin *Binary, ns string, args ...string) (time.Duration, time.Duration, int, []byte, error) {
	d, code, out, err := runAgent(bin, ns, args...)
	return d.wall, d.cpu, code, out, err
}

type runTimes struct{ wall, cpu time.Duration }

func runAgent(bin *Binary, ns string, args ...string) (runTimes, int, []byte, error) {
	var out, errb bytes.Buffer
	cmd := bin.command(args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := cmd.Start
	if ns != "" {
		start = func() error { return testbed.Start(ns, cmd) }
	}
	t0 := time.Now()
	if err := start(); err != nil {
		return runTimes{}, 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return runTimes{}, 0, nil, fmt.Errorf("%s %v: killed after 30s", bin.Path, args[0])
	}
	d := runTimes{wall: time.Since(t0)}
	if ps := cmd.ProcessState; ps != nil {
		d.cpu = ps.UserTime() + ps.SystemTime()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return d, 0, nil, err
	}
	if ee != nil && ee.ExitCode() == 2 {
		return d, 2, out.Bytes(), fmt.Errorf("%s %s: exit 2: %s", bin.Path, args[0], bytes.TrimSpace(errb.Bytes()))
	}
	return d, cmd.ProcessState.ExitCode(), out.Bytes(), nil
}

// healthyIn counts the healthy reports in `status --json` output (a list
// of reports) and collects the others' problems, each once.
func healthyIn(out []byte) (int, []string) {
	var reps []struct {
		Name     string   `json:"name"`
		Healthy  bool     `json:"healthy"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal(out, &reps); err != nil {
		return 0, []string{"unreadable status output: " + err.Error()}
	}
	n := 0
	var problems []string
	for _, r := range reps {
		if r.Healthy {
			n++
		}
		for _, p := range r.Problems {
			if !slices.Contains(problems, p) {
				problems = append(problems, p)
			}
		}
	}
	return n, problems
}
