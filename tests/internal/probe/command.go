package probe

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"time"
)

// CommandTimeout bounds Command and Getent (glibc's resolver retries make
// a blocked lookup slow; a working one is instant).
var CommandTimeout = 5 * time.Second

// Command runs argv with its network namespace set to ns (mount namespace
// unchanged) and returns Reached on exit 0, Rejected on another exit
// status, TimedOut if it outlives CommandTimeout. Answer is stdout; Err
// carries stderr.
func Command(ns string, argv ...string) Result {
	return CommandWithin(ns, CommandTimeout, argv...)
}

// CommandWithin is Command with its own timeout instead of CommandTimeout.
func CommandWithin(ns string, timeout time.Duration, argv ...string) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := Result{Probe: strings.Join(argv, " ") + " in " + ns}
	if err := startIn(ns, cmd); err != nil {
		r.Outcome, r.Err = Failed, err
		return r
	}
	err := cmd.Wait()
	r.RTT = time.Since(start)
	r.Answer = stdout.String()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Outcome, r.Err = TimedOut, errors.New("killed after "+timeout.String()+": "+stderr.String())
	case err == nil:
		r.Outcome = Reached
	case errors.As(err, &ee):
		r.Outcome, r.Err = Rejected, errors.New(ee.Error()+": "+strings.TrimSpace(stderr.String()))
	default:
		r.Outcome, r.Err = Failed, err
	}
	return r
}

// Getent resolves host with `getent hosts` through `agent exec name --`
// (which runs it in namespace name with its resolv.conf), starting the
// agent in hostNS. Addrs holds the addresses getent printed.
func Getent(hostNS, agent, name, host string) Result {
	r := Command(hostNS, agent, "exec", name, "--", "getent", "hosts", host)
	for _, line := range strings.Split(r.Answer, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if a, err := netip.ParseAddr(f[0]); err == nil {
				r.Addrs = append(r.Addrs, a)
			}
		}
	}
	return r
}
