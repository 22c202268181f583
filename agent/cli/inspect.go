package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/status"
)

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

func cmdStatus(args []string, out io.Writer) int {
	fs, _, _ := flags("status")
	asJSON := fs.Bool("json", false, "print JSON")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	// Without root, the namespace, the tunnel and the kill switch cannot be
	// read: a report would say they are missing (a false alarm).
	if rc := needRoot("status", "it reads the namespace, the tunnel and the kill switch"); rc >= 0 {
		return rc
	}
	noGC()
	names := fs.Args()
	if len(names) == 0 {
		names = status.Names()
	}
	var reports []*status.Report
	rc := ExitOK
	got, errs := getAll(names)
	for i, n := range names {
		r, err := got[i], errs[i]
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && len(fs.Args()) > 0 {
				fmt.Fprintf(os.Stderr, "vpn-agent: namespace %s is not up\n", n)
				return ExitBadInput
			}
			return fail(err)
		}
		if !r.Healthy {
			rc = ExitFailure
		}
		reports = append(reports, r)
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if len(fs.Args()) == 1 {
			enc.Encode(reports[0])
		} else {
			if reports == nil {
				reports = []*status.Report{}
			}
			enc.Encode(reports)
		}
		return rc
	}
	if len(reports) == 0 {
		fmt.Fprintln(out, "no namespaces")
	}
	for _, r := range reports {
		printReport(out, r)
	}
	return rc
}

// statusMemoryLimit is the heap at which status collects garbage after
// all (see noGC): a status of 100 namespaces allocates a few tens of MiB.
const statusMemoryLimit = 256 << 20

// noGC turns the garbage collector off for status, a short-lived process
// that allocates little but often: collecting was a sixth of its CPU.
// The memory limit is the safety net: past it the collector runs again.
func noGC() {
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(statusMemoryLimit)
}

// statusWorkers bounds the namespaces inspected at once: each inspection
// waits on netlink, nftables and the UAPI socket more than it computes, so
// a few in parallel cut the wall time of a status of many namespaces.
const statusWorkers = 8

// getAll inspects the namespaces, a few at a time, and returns their
// reports and errors in the order of names.
func getAll(names []string) ([]*status.Report, []error) {
	reports, errs := make([]*status.Report, len(names)), make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(statusWorkers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				reports[i], errs[i] = status.Get(names[i])
			}
		}()
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	return reports, errs
}

func printReport(w io.Writer, r *status.Report) {
	state := "healthy"
	if !r.Healthy {
		state = "DEGRADED"
	}
	fmt.Fprintf(w, "%s: %s\n", r.Name, state)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem:    %s\n", p)
	}
	agent := "none (kernel data plane needs none)"
	if r.AgentPID > 0 {
		agent = fmt.Sprintf("pid %d (%s)", r.AgentPID, map[bool]string{true: "running", false: "NOT running"}[r.AgentRunning])
	}
	fmt.Fprintf(w, "  backend:    %s, agent %s\n", r.Backend, agent)
	fmt.Fprintf(w, "  interface:  %s (%s, mtu %d) %s\n", r.Interface, map[bool]string{true: "up", false: "down"}[r.LinkUp], r.MTU, strings.Join(r.Addresses, " "))
	if r.Server != nil {
		srv := fmt.Sprintf("%d of %d", r.Server.Index+1, r.Server.Pool)
		if r.Server.ConfigFile != "" {
			srv += ", " + r.Server.ConfigFile
		}
		fmt.Fprintf(w, "  server:     %s, endpoint %s\n", srv, r.Server.Endpoint)
	}
	if r.Tunnel != nil {
		line := fmt.Sprintf("%s since %s", r.Tunnel.TunnelState(), r.Tunnel.Since.Format(time.RFC3339))
		if r.Tunnel.Failovers > 0 {
			line += fmt.Sprintf(", %d failovers", r.Tunnel.Failovers)
		}
		if r.Tunnel.Cause != "" {
			line += ": " + r.Tunnel.Cause
		}
		fmt.Fprintf(w, "  tunnel:     %s\n", line)
		if sb := r.Tunnel.Standby; sb != nil {
			line := sb.State
			if sb.Index >= 0 && r.Server != nil {
				line = fmt.Sprintf("%d of %d", sb.Index+1, r.Server.Pool)
				if sb.ConfigFile != "" {
					line += ", " + sb.ConfigFile
				}
				line += fmt.Sprintf(", endpoint %s, %s", sb.Endpoint, sb.State)
			}
			if sb.Why != "" {
				line += ": " + sb.Why
			}
			fmt.Fprintf(w, "  standby:    %s\n", line)
		}
	}
	if pf := r.PortForward; pf != nil {
		port := "none"
		if pf.Port != 0 {
			port = fmt.Sprintf("%d (%s", pf.Port, strings.Join(pf.Protocols, ", "))
			if pf.ExternalPort != 0 {
				port += fmt.Sprintf(", public port %d", pf.ExternalPort)
			}
			if !pf.Expires.IsZero() {
				port += ", lease until " + pf.Expires.Format(time.RFC3339)
			}
			port += ")"
		}
		line := fmt.Sprintf("%s, %s via %s", port, pf.State, pf.Gateway)
		if pf.Error != "" {
			line += ": " + pf.Error
		}
		fmt.Fprintf(w, "  forwarded:  %s\n", line)
		for _, p := range pf.Pending {
			fmt.Fprintf(w, "  push:       %s\n", p)
		}
	}
	for _, p := range r.Peers {
		hs := "never"
		if p.HandshakeAgeSec != nil {
			hs = time.Duration(*p.HandshakeAgeSec*float64(time.Second)).Round(time.Second).String() + " ago"
		}
		if p.Idle {
			hs += " (idle: nothing sent since)"
		}
		role := "peer:      "
		if p.Standby {
			role = "standby peer:"
		}
		fmt.Fprintf(w, "  %s %s, handshake %s, rx %d B, tx %d B\n", role, p.Endpoint, hs, p.RxBytes, p.TxBytes)
	}
	pol := "NOT loaded"
	if r.Policy.Loaded {
		pol = fmt.Sprintf("loaded, %d rules, matches config: %v", r.Policy.Rules, r.Policy.Matches)
	}
	fmt.Fprintf(w, "  kill switch: %s\n", pol)
	if len(r.Policy.Drops) > 0 {
		var parts []string
		for k, v := range r.Policy.Drops {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
		fmt.Fprintf(w, "  dropped:    %s\n", strings.Join(sortedStrings(parts), " "))
	}
	fmt.Fprintf(w, "  dns:        %s\n", strings.Join(r.DNS, " "))
	if r.HostLink != "" {
		fmt.Fprintf(w, "  host link:  %s\n", r.HostLink)
	}
}
