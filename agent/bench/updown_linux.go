package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Up/down paths.
const (
	pathAgent = "agent"
	pathShell = "shell"
)

const upDownSteps = "up: a fresh confined namespace to a configured tunnel with the kill switch loaded " +
	"(netns, nft table, resolver files, tunnel interface - kernel: a WireGuard link born in the underlay namespace " +
	"and moved in; userspace: a TUN created inside the namespace, its UDP socket in the underlay - MTU, address, " +
	"link up, default route; the handshake is excluded); down: until engine.Teardown returns - the data plane " +
	"stopped (UDP socket closed, peers stopped), the namespace, resolver and runtime files removed; reclaim: down " +
	"plus the kernel's unregistering of a userspace TUN link, which Teardown leaves running in the background " +
	"(vpn-agent run waits for it before exiting)"

// upDown times bringing fresh confined namespaces up and down: the agent
// path (engine.Up and engine.Teardown in this process, as `vpn-agent run`
// does) against the same steps done by ip, nft and wg commands from a
// shell script with the stock wireguard-go (or a kernel link), both run
// by the bench in the same rounds (ABBA).
func (r *runner) upDown(ctx context.Context) (*UpDown, error) {
	o := r.o
	ud := &UpDown{Cycles: o.UpDownCycles, Paths: map[string]*UDPath{}, StepsDoc: upDownSteps}
	paths := []string{pathAgent}
	ud.Paths[pathAgent] = &UDPath{Description: "engine.Up + engine.Teardown in-process (" + string(r.backend) + " backend)", StepMs: map[string][]float64{}}
	if why := r.shellUnavailable(); why == "" {
		paths = append(paths, pathShell)
		ud.Paths[pathShell] = &UDPath{Description: r.shellDesc()}
	} else {
		ud.Skipped = "shell baseline skipped: " + why
	}
	n := 0
	for round := range o.Samples {
		for _, p := range ABBA(paths, round) {
			for range o.UpDownCycles {
				if err := ctx.Err(); err != nil {
					return ud, err
				}
				n++
				var up, down, reclaim time.Duration
				var err error
				if p == pathAgent {
					up, down, reclaim, err = r.agentCycle(ctx, fmt.Sprintf("%se%d", r.t.ID, n%1000), ud.Paths[p].StepMs)
					ud.Paths[p].ReclaimMs = append(ud.Paths[p].ReclaimMs, ms(reclaim))
				} else {
					up, down, err = r.shellCycle(ctx, fmt.Sprintf("%ss%d", r.t.ID, n%1000))
				}
				if err != nil {
					return ud, fmt.Errorf("up/down (%s): %w", p, err)
				}
				path := ud.Paths[p]
				path.UpMs = append(path.UpMs, ms(up))
				path.DownMs = append(path.DownMs, ms(down))
			}
			path := ud.Paths[p]
			fmt.Fprintf(o.Progress, "[updown] round %d %-5s up %6.1f ms  down %6.1f ms (medians so far)\n",
				round+1, p, Median(path.UpMs), Median(path.DownMs))
		}
	}
	for _, p := range ud.Paths {
		p.Up, p.Down = Summarize(p.UpMs), Summarize(p.DownMs)
		if len(p.ReclaimMs) > 0 {
			d := Summarize(p.ReclaimMs)
			p.Reclaim = &d
		}
		if len(p.StepMs) > 0 {
			p.StepMedian = map[string]float64{}
			for k, v := range p.StepMs {
				p.StepMedian[k] = Median(v)
			}
		}
	}
	return ud, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// agentCycle runs engine.Up and engine.Teardown for a fresh namespace on
// the underlay thread, timing Up per step through the engine's AfterStep
// hook. down ends when Teardown returns; reclaim when the kernel has also
// removed the tunnel interface (untimed work must not overlap the next
// cycle, so the cycle waits for it).
func (r *runner) agentCycle(ctx context.Context, name string, steps map[string][]float64) (up, down, reclaim time.Duration, err error) {
	spec, err := r.t.agentSpec(name, r.backend, r.o.MTU, r.keyFile)
	if err != nil {
		return 0, 0, 0, err
	}
	var mark time.Time
	eng := &engine.Engine{Log: quietLogger(r.o.Log)}
	first := true
	eng.AfterStep = func(step string) error {
		now := time.Now()
		if first {
			step = "lock+" + step // TryLock and the backend check come first
			first = false
		}
		steps[step] = append(steps[step], ms(now.Sub(mark)))
		mark = now
		return nil
	}
	var inst *engine.Instance
	err = r.t.under.Do(func() error {
		t0 := time.Now()
		mark = t0
		var err error
		inst, err = eng.Up(ctx, spec, "")
		up = time.Since(t0)
		return err
	})
	if err != nil {
		removeByName(name)
		return 0, 0, 0, err
	}
	verr := verifyUp(name, spec.Interface)
	var t0 time.Time
	err = r.t.under.Do(func() error {
		t0 = time.Now()
		err := eng.Teardown(inst)
		down = time.Since(t0)
		return err
	})
	if err == nil {
		err = verifyDown(name, spec.Interface)
	}
	select {
	case <-inst.Reclaimed():
		reclaim = time.Since(t0)
	case <-time.After(10 * time.Second):
		err = errors.Join(err, fmt.Errorf("%s: tunnel interface not removed 10 s after teardown", name))
	}
	return up, down, reclaim, errors.Join(verr, err)
}

// verifyDown checks (untimed, right after Teardown returned) what down
// promises at that point: no namespace, resolver or runtime files, no
// tunnel link or UAPI socket in the host namespace.
func verifyDown(name, iface string) error {
	var errs []error
	for _, p := range []string{names.Netns(name), names.ResolverDir(name), names.StateDir(name),
		names.Lock(name), names.UAPISocket(iface)} {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, fmt.Errorf("%s still exists after teardown", p))
		}
	}
	if _, err := netlink.LinkByName(iface); err == nil {
		errs = append(errs, fmt.Errorf("%s still exists in the host namespace after teardown", iface))
	}
	return errors.Join(errs...)
}

// verifyUp checks (untimed) that a namespace really is up: the kill
// switch loaded and the tunnel interface up inside it.
func verifyUp(name, iface string) error {
	st, err := policy.Inspect(names.Netns(name), names.Table)
	if err != nil {
		return err
	}
	if !st.Loaded {
		return fmt.Errorf("%s: kill switch not loaded after up", name)
	}
	err = testbed.WithLink(name, iface, func(_ *netlink.Handle, l netlink.Link) error {
		if l.Attrs().Flags&net.FlagUp == 0 {
			return errors.New("link down")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: tunnel %s after up: %w", name, iface, err)
	}
	return nil
}

// removeByName removes what a failed cycle may have left.
func removeByName(name string) {
	netns.Delete(name)
	os.RemoveAll(names.ResolverDir(name))
	os.RemoveAll(names.StateDir(name))
	os.Remove(names.Lock(name))
}

func (r *runner) shellUnavailable() string {
	switch {
	case r.o.WG == "":
		return "wg not found on PATH"
	case r.backend == config.BackendUserspace && r.o.WireGuardGo == "":
		return "no stock wireguard-go for a userspace shell baseline (see the reference mode)"
	}
	return ""
}

func (r *runner) shellDesc() string {
	if r.backend == config.BackendKernel {
		return "sh script: ip netns add, nft -f, resolv.conf, ip link add type wireguard, wg setconf, ip link set netns, ip addr/link/route"
	}
	return "sh script: ip netns add, nft -f, resolv.conf, stock wireguard-go " + r.o.WireGuardGo + " (daemonizes when ready), wg setconf, ip link set netns, ip addr/link/route"
}

// shellUp and shellDown are the baseline: the same steps as engine.Up and
// engine.Teardown, done with commands.
const shellUp = `set -e
ip netns add "$NS"
ip -n "$NS" link set lo up
ip netns exec "$NS" nft -f "$NFT"
mkdir -p "/etc/netns/$NS"
cp "$RESOLV" "/etc/netns/$NS/resolv.conf"
if [ -n "$WGGO" ]; then "$WGGO" "$IF"; else ip link add "$IF" type wireguard; fi
wg setconf "$IF" "$WGCONF"
ip link set "$IF" netns "$NS"
ip -n "$NS" link set "$IF" mtu "$MTU"
ip -n "$NS" addr add "$ADDR" dev "$IF"
ip -n "$NS" link set "$IF" up
ip -n "$NS" route add default dev "$IF"
`

const shellDown = `ip -n "$NS" link del "$IF"
ip netns del "$NS"
rm -rf "/etc/netns/$NS"
`

// shellCycle runs the baseline scripts for namespace name.
func (r *runner) shellCycle(ctx context.Context, name string) (up, down time.Duration, err error) {
	iface := names.Tunnel(name)
	env, err := r.shellEnv(name, iface)
	if err != nil {
		return 0, 0, err
	}
	defer removeByName(name)
	up, err = r.sh(ctx, shellUp, env)
	if err != nil {
		r.sh(ctx, shellDown, env)
		return 0, 0, fmt.Errorf("shell up: %w", err)
	}
	verr := verifyUp(name, iface)
	down, err = r.sh(ctx, shellDown, env)
	if err != nil {
		return 0, 0, fmt.Errorf("shell down: %w", err)
	}
	// Untimed: the daemonized wireguard-go exits once its TUN is gone.
	if r.backend == config.BackendUserspace {
		if err := waitGone(names.UAPISocket(iface), 3*time.Second); err != nil {
			killStock(r.o.WireGuardGo, iface)
		}
	}
	return up, down, verr
}

// shellEnv writes the baseline's input files (untimed preparation, as a
// real setup would have them on disk already) and returns the environment.
func (r *runner) shellEnv(name, iface string) ([]string, error) {
	spec, err := r.t.agentSpec(name, r.backend, r.o.MTU, r.keyFile)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.t.Dir, "shell")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	nftFile := filepath.Join(dir, "policy.nft")
	resolv := filepath.Join(dir, "resolv.conf")
	wgconf := filepath.Join(dir, "wg.conf")
	files := map[string]string{
		nftFile: policy.Compile(spec).Render(),
		resolv:  string(engine.ResolvConf(spec)),
		wgconf: fmt.Sprintf("[Interface]\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\nAllowedIPs = 0.0.0.0/0\n",
			r.t.AgentKey, r.t.PeerKey.PublicKey(), underlayPeer, peerPort),
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			return nil, fmt.Errorf("shell baseline input: %w", err)
		}
	}
	wggo := ""
	if r.backend == config.BackendUserspace {
		wggo = r.o.WireGuardGo
	}
	return append(os.Environ(), stockEnv,
		"NS="+name, "IF="+iface, "NFT="+nftFile, "RESOLV="+resolv, "WGCONF="+wgconf,
		"WGGO="+wggo, "ADDR="+tunnelAgent+"/32", "MTU="+itoa(r.o.MTU)), nil
}

// sh runs a script on the underlay thread and times it. Its output goes
// to a file, not a pipe: the daemonized wireguard-go must not be able to
// hold the bench waiting for a pipe it inherited.
func (r *runner) sh(ctx context.Context, script string, env []string) (time.Duration, error) {
	logf, err := os.CreateTemp(r.t.Dir, "sh-*.log")
	if err != nil {
		return 0, fmt.Errorf("shell baseline log: %w", err)
	}
	defer os.Remove(logf.Name())
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	cmd.WaitDelay = time.Second
	var d time.Duration
	err = r.t.under.Do(func() error {
		t0 := time.Now()
		err := cmd.Run()
		d = time.Since(t0)
		return err
	})
	if err != nil {
		out, _ := os.ReadFile(logf.Name())
		return d, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return d, nil
}

func waitGone(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still present", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killStock finds the daemonized stock wireguard-go (binary bin) serving
// exactly iface (a bench-unique name) and kills it.
func killStock(bin, iface string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 2 && filepath.Base(args[0]) == filepath.Base(bin) && args[len(args)-1] == iface {
			var pid int
			fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
			if pid > 0 {
				syscallKill(pid)
			}
		}
	}
}
