package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// cmdDemo shows confinement end to end with no VPN account: a local
// WireGuard provider in its own namespace, a simulated host namespace
// running the agent, and a confined namespace whose only way out is the
// tunnel. Nothing touches this machine's own network.
func cmdDemo(args []string, out io.Writer) int {
	fs, _, _ := flags("demo")
	var user []string
	if i := indexOf(args, "--"); i >= 0 {
		args, user = args[:i], args[i+1:]
		if len(user) == 0 {
			return fail(&config.FieldError{Field: "demo", Msg: "nothing after --", Fix: "e.g. vpn-agent demo -- curl http://target.demo/"})
		}
	}
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if fs.NArg() > 0 {
		return fail(&config.FieldError{Field: "demo", Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0)), Fix: "put the command to run after --, e.g. vpn-agent demo -- " + strings.Join(fs.Args(), " ")})
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	say := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }

	l, err := testbed.StartLab()
	if err != nil {
		return fail(fmt.Errorf("demo: %w", err))
	}
	defer l.Close()
	say("built a local WireGuard provider (namespaces %s, %s); no VPN account needed", l.Host, l.Provider)
	dir, err := os.MkdirTemp("", "vpn-agent-demo-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	name := l.ID + "c"
	cfg, err := l.WriteConfig(dir, name)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	// The agent runs in the lab's simulated host namespace; the narration
	// shows each command exactly as it runs.
	shown := func(argv ...string) string {
		return strings.Join(l.HostCommand(ctx, argv...).Args, " ")
	}
	run := func(argv ...string) (string, error) {
		say("%s", shown(argv...))
		b, err := l.HostCommand(ctx, argv...).CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}
	if o, err := run(self, "up", "--log-level", "warn", "--config", cfg); err != nil {
		return fail(fmt.Errorf("demo: up: %v: %s", err, o))
	} else {
		fmt.Fprintln(out, indent(o))
	}
	defer func() {
		o, _ := run(self, "down", "--log-level", "warn", name)
		fmt.Fprintln(out, indent(o))
		fmt.Fprintln(out, indent("removed the demo namespaces; nothing is left"))
	}()
	if len(user) > 0 {
		argv := append([]string{self, "exec", name, "--"}, user...)
		say("%s", shown(argv...))
		cmd := l.HostCommand(ctx, argv...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, os.Stderr
		err := cmd.Run()
		rc := cmd.ProcessState.ExitCode()
		if err != nil && rc < 0 {
			return fail(fmt.Errorf("demo: run %s: %w", user[0], err))
		}
		say("%s exited with status %d (confined to %s; this demo checked nothing else)", user[0], rc, name)
		return rc
	}
	ok := true
	{
		target := "http://" + testbed.LabTarget + "/"
		say("inside %s, from this process: fetch %s, resolving through the namespace's %s", name, target, names.ResolvConf(name))
		o, err := waitFor(5*time.Second, func() (string, error) { return fetchIn(name, target, 3*time.Second) })
		fmt.Fprintln(out, indent(o))
		ok = ok && err == nil
		host := netip.AddrPortFrom(testbed.LabHost.Addr(), 53).String()
		say("inside %s: DNS over TCP to a resolver other than the tunnel's (the host's, %s): the kill switch must refuse it at once", name, host)
		o, err = connectIn(name, host, 3*time.Second)
		fmt.Fprintln(out, indent(o))
		ok = ok && err != nil
		o, _ = run(self, "status", name)
		fmt.Fprintln(out, indent(o))
		say("kill switch: stopping the provider's WireGuard peer, then fetching again (must fail, nothing leaks)")
		l.StopPeer()
		o, err = fetchIn(name, target, 2*time.Second)
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

// fetchIn resolves url's host through namespace ns's own resolv.conf and
// GETs it, every socket created inside ns. It returns what it saw.
func fetchIn(ns, url string, timeout time.Duration) (string, error) {
	start := time.Now()
	failed := func(err error) (string, error) {
		return fmt.Sprintf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, server, err := testbed.Resolver(ns, names.ResolvConf(ns))
	if err != nil {
		return failed(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return failed(err)
	}
	addrs, err := res.LookupHost(ctx, req.URL.Hostname())
	if de := (*net.DNSError)(nil); errors.As(err, &de) {
		de.Server = net.JoinHostPort(server, "53") // not the host's, which Go would name
	}
	if err != nil {
		return failed(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "resolved %s -> %s (nameserver %s)\n", req.URL.Hostname(), strings.Join(addrs, ", "), server)
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return testbed.DialIn(ctx, ns, network, net.JoinHostPort(addrs[0], port))
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		o, err := failed(err)
		return b.String() + o, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(&b, "GET %s -> %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	return b.String(), nil
}

// connectIn opens a TCP connection to addr from inside namespace ns.
func connectIn(ns, addr string, timeout time.Duration) (string, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := testbed.DialIn(ctx, ns, "tcp", addr)
	if err != nil {
		return fmt.Sprintf("blocked after %s: %v", time.Since(start).Round(time.Millisecond), err), err
	}
	c.Close()
	return "connected to " + addr, nil
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
