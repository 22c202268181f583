package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

// fakeRepairer records the reports it is asked to repair.
type fakeRepairer struct {
	got []*health.Report
	err error
}

func (f *fakeRepairer) Repair(_ context.Context, _ *engine.Instance, rep *health.Report) error {
	f.got = append(f.got, rep)
	return f.err
}

// notifySocket points $NOTIFY_SOCKET at a socket of the test's and
// returns a function that reads what was sent since the last call.
func notifySocket(t *testing.T) func() []string {
	p := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	return func() []string {
		var out []string
		buf := make([]byte, 4096)
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			n, err := c.Read(buf)
			if err != nil {
				return out
			}
			out = append(out, string(buf[:n]))
		}
	}
}

func TestRepairFromReport(t *testing.T) {
	sent := notifySocket(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	inst := &engine.Instance{Spec: &config.Spec{Name: "torrent"}, Backend: config.BackendKernel}

	// Healthy: no repair, nothing sent.
	f := &fakeRepairer{}
	if !repair(context.Background(), f, inst, &health.Report{Name: "torrent"}, log) || len(f.got) != 0 {
		t.Errorf("a healthy report was repaired: %v", f.got)
	}
	if msgs := sent(); len(msgs) != 0 {
		t.Errorf("healthy: sent %q", msgs)
	}

	// Unhealthy: the engine gets that very report; systemd hears what is
	// being repaired, then that the namespace is up again.
	rep := &health.Report{Name: "torrent"}
	rep.Add(health.PolicyMissing, "kill-switch table is NOT loaded")
	rep.Add(health.TunnelMissing, "interface vc-torrent is down")
	if !repair(context.Background(), f, inst, rep, log) {
		t.Error("a successful repair reported failure")
	}
	if len(f.got) != 1 || f.got[0] != rep {
		t.Errorf("Repair got %v, want the health report once", f.got)
	}
	want := []string{"STATUS=repairing: kill-switch table is NOT loaded", "STATUS=namespace torrent up (kernel backend)"}
	if msgs := sent(); strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("sent %q, want %q", msgs, want)
	}

	// A failed repair is retried at the next check: no claim it is up.
	f = &fakeRepairer{err: errors.New("no")}
	if repair(context.Background(), f, inst, rep, log) {
		t.Error("a failed repair reported success")
	}
	if msgs := sent(); len(msgs) != 1 || !strings.HasPrefix(msgs[0], "STATUS=repairing") {
		t.Errorf("after a failed repair sent %q, want only the repairing status", msgs)
	}
}
