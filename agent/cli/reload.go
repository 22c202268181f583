package cli

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// runningDiff compares s with the config the namespace runs, from its
// state file (its server: the one of s from the same wg-quick file): the
// live parts that differ and the digest of s as the namespace would run
// it, or an error (bad input) when a part that cannot change live
// differs. ok is false when nothing is known of a running config (not
// up, or an agent from before digests).
func runningDiff(s *config.Spec) (st *engine.State, live []string, want string, ok bool, err error) {
	st, rerr := engine.ReadState(s.Name)
	if rerr != nil || st.ConfigDigests == nil || !netns.Exists(s.Name) {
		return nil, nil, "", false, nil
	}
	twin, live, err := engine.Compare(s.Name, st.ConfigDigests, st.ServerConfig, s)
	if err != nil {
		return st, nil, "", true, err
	}
	return st, live, engine.Digest(engine.Digests(twin)), true, nil
}

// upRunning is `up` for a namespace a ready agent (pid) already holds:
// nothing to do for the same config; a changed one is reloaded by that
// agent (SIGHUP), and up waits for the outcome it records.
func upRunning(out io.Writer, s *config.Spec, abs string, pid int, timeout time.Duration) int {
	st, live, want, known, err := runningDiff(s)
	if err != nil {
		return fail(err)
	}
	if !known || len(live) == 0 {
		fmt.Fprintf(out, "namespace %s already up (agent pid %d)\n", s.Name, pid)
		return ExitOK
	}
	if st.ConfigPath != abs {
		return fail(&config.FieldError{Field: "--config", Msg: fmt.Sprintf("namespace %s is up with config %s, not %s", s.Name, st.ConfigPath, abs), Fix: "edit that file and run up with it, or run vpn-agent down " + s.Name + " first"})
	}
	sent := time.Now()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fail(fmt.Errorf("ask agent pid %d to reload: %w", pid, err))
	}
	deadline := sent.Add(timeout)
	for {
		if st, err := engine.ReadState(s.Name); err == nil && st.Reload != nil && !st.Reload.At.Before(sent) {
			r := st.Reload
			switch {
			case r.Error != "" && r.BadInput:
				return fail(&config.FieldError{Field: "--config", Msg: "reload refused: " + r.Error, Fix: "the running config was kept"})
			case r.Error != "":
				return fail(fmt.Errorf("reload of %s failed (the running config was kept): %s", s.Name, r.Error))
			case r.Digest != want:
				return fail(fmt.Errorf("namespace %s reloaded %s, but it changed again meanwhile; run up again", s.Name, abs))
			}
			fmt.Fprintf(out, "namespace %s reloaded (changed: %s)\n", s.Name, strings.Join(live, ", "))
			return ExitOK
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("agent pid %d did not report a reload within %s", pid, timeout))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
