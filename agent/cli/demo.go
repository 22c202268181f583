package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/lab"
)

// cmdDemo shows confinement end to end with no VPN account: a local
// WireGuard provider in its own namespace, a simulated host namespace
// running the agent, and a confined namespace whose only way out is the
// tunnel. Nothing touches this machine's own network.
func cmdDemo(args []string, out io.Writer) int {
	fs, _, _ := flags("demo")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	user := fs.Args()
	if len(user) > 0 && user[0] == "--" {
		user = user[1:]
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	id := randID()
	say := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }

	say("building a local WireGuard provider (namespaces vd%s-host, vd%s-prov); no VPN account needed", id, id)
	l, err := lab.Start("vd" + id)
	if err != nil {
		return fail(fmt.Errorf("demo: %w", err))
	}
	defer l.Close()
	dir, err := os.MkdirTemp("", "vpn-agent-demo-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	name := "demo" + id
	cfg, err := l.WriteConfig(dir, name)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	run := func(argv ...string) (string, error) {
		b, err := l.HostCommand(ctx, argv...).CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}
	say("vpn-agent up --config %s", cfg)
	if o, err := run(self, "up", "--log-level", "warn", "--config", cfg); err != nil {
		return fail(fmt.Errorf("demo: up: %v: %s", err, o))
	} else {
		fmt.Fprintln(out, indent(o))
	}
	defer func() {
		o, _ := run(self, "down", "--log-level", "warn", name)
		say("vpn-agent down %s", name)
		fmt.Fprintln(out, indent(o))
		fmt.Fprintln(out, indent("removed the demo namespaces; nothing is left"))
	}()
	exec1 := func(argv ...string) (string, error) {
		return run(append([]string{self, "exec", name, "--"}, argv...)...)
	}
	ok := true
	if len(user) > 0 {
		say("vpn-agent exec %s -- %s", name, strings.Join(user, " "))
		cmd := l.HostCommand(ctx, append([]string{self, "exec", name, "--"}, user...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(out, indent("command failed: "+err.Error()))
			ok = false
		}
	} else {
		target := "http://" + lab.TargetName + "/"
		say("inside the tunnel: vpn-agent exec %s -- fetch %s (DNS via the tunnel's resolver)", name, target)
		o, err := waitFor(5*time.Second, func() (string, error) { return exec1(self, "probe", target) })
		fmt.Fprintln(out, indent(o))
		ok = ok && err == nil
		say("DNS to a resolver other than the tunnel's (the host's, %s:53): the kill switch must refuse it at once", lab.HostAddr.Addr())
		o, err = exec1(self, "probe", "--tcp", lab.HostAddr.Addr().String()+":53")
		fmt.Fprintln(out, indent(o))
		ok = ok && err != nil
		say("vpn-agent status %s", name)
		o, _ = run(self, "status", name)
		fmt.Fprintln(out, indent(o))
		say("kill switch: stopping the provider's WireGuard peer, then fetching again (must fail, nothing leaks)")
		l.StopPeer()
		o, err = exec1(self, "probe", "--timeout", "2s", target)
		fmt.Fprintln(out, indent(o))
		ok = ok && err != nil
	}
	if !ok {
		say("demo FAILED")
		return ExitFailure
	}
	say("demo OK: the confined namespace reached its target only through the tunnel")
	return ExitOK
}

// cmdProbe is a tiny client used inside namespaces by the demo: an HTTP
// GET (names resolved through /etc/resolv.conf) or a TCP connect.
func cmdProbe(args []string, out io.Writer) int {
	fs, _, _ := flags("probe")
	tcp := fs.String("tcp", "", "connect to HOST:PORT instead of fetching a URL")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	start := time.Now()
	if *tcp != "" {
		c, err := net.DialTimeout("tcp", *tcp, *timeout)
		if err != nil {
			fmt.Fprintf(out, "blocked after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
			return ExitFailure
		}
		c.Close()
		fmt.Fprintf(out, "connected to %s\n", *tcp)
		return ExitOK
	}
	if fs.NArg() != 1 {
		return fail(fmt.Errorf("probe: give a URL or --tcp HOST:PORT"))
	}
	u := fs.Arg(0)
	host := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"), "/")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, strings.Split(host, "/")[0])
	if err != nil {
		fmt.Fprintf(out, "failed after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
		return ExitFailure
	}
	fmt.Fprintf(out, "resolved %s -> %s\n", host, strings.Join(addrs, ", "))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(out, "failed after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
		return ExitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(out, "GET %s -> %s: %s\n", u, resp.Status, strings.TrimSpace(string(body)))
	return ExitOK
}

func waitFor(d time.Duration, f func() (string, error)) (string, error) {
	deadline := time.Now().Add(d)
	for {
		o, err := f()
		if err == nil || time.Now().After(deadline) {
			return o, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func randID() string {
	b := make([]byte, 2)
	rand.Read(b)
	return hex.EncodeToString(b)
}
