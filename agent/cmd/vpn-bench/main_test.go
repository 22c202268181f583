package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// build builds vpn-bench into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vpn-bench")
	if out, err := exec.Command(testenv.GoTool(t), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// run runs bin with args and returns its stdout, stderr and exit code.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return stdout.String(), stderr.String(), ee.ExitCode()
	default:
		t.Fatalf("vpn-bench %v: %v\nstderr:\n%s", args, err, stderr.String())
		return "", "", -1
	}
}

// TestBinary runs the built vpn-bench: help and a bad flag, then (as root,
// with iperf3) a one-second tunnel sample, whose provider peer is
// vpn-bench re-executing itself in its helper role, and two up/down
// cycles.
func TestBinary(t *testing.T) {
	bin := build(t)
	out, errOut, rc := run(t, bin, "--help")
	if rc != 0 || !strings.HasPrefix(out, "Usage: vpn-bench [flags]") || errOut != "" {
		t.Errorf("--help: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	out, errOut, rc = run(t, bin, "--no-such-flag")
	if rc != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "-no-such-flag") {
		t.Errorf("bad flag: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}

	testenv.NeedRoot(t, "a real run: network namespaces, nftables")
	if testing.Short() {
		t.Skip("real bench run skipped in -short mode")
	}
	testenv.NeedTools(t, "iperf3", "ip", "nft")
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "b.json")
	out, errOut, rc = run(t, bin, "--workloads", "tcp1-up,updown", "--modes", "tunnel", "--samples", "1",
		"--duration", "1", "--omit", "0", "--updown-cycles", "2", "--shaping", "off",
		"--backend", "userspace", "--out", jsonPath)
	if rc != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, errOut)
	}
	if !strings.Contains(out, "wrote "+jsonPath+" and "+filepath.Join(dir, "b.svg")) {
		t.Errorf("stdout does not say what it wrote:\n%s", out)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Tool     string
		Topology struct{ ID, Peer string }
		Samples  []struct{ Workload, Mode, Error string }
		UpDown   *json.RawMessage
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Tool != "vpn-bench" || res.UpDown == nil || len(res.Samples) != 1 || res.Samples[0].Error != "" {
		t.Errorf("result: tool %q, upDown %v, samples %+v", res.Tool, res.UpDown != nil, res.Samples)
	}
	if !strings.Contains(res.Topology.Peer, "helper process") {
		t.Errorf("peer %q, want the userspace helper process", res.Topology.Peer)
	}
	if left, _ := filepath.Glob(filepath.Join(names.NetnsDir, res.Topology.ID+"*")); res.Topology.ID == "" || len(left) > 0 {
		t.Errorf("topology %q: namespaces left behind: %v", res.Topology.ID, left)
	}
}
