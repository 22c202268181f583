package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// fakeGateway grants what its fields say; down: it does not answer.
type fakeGateway struct {
	mu       sync.Mutex
	port     uint16 // proton: the port it gives; rfc: the external port (0: the one asked)
	lifetime time.Duration
	epoch    uint32
	down     bool
	asked    []string // "udp 0->1"
}

func (g *fakeGateway) Map(ctx context.Context, proto string, internal, external uint16, lifetime time.Duration) (Lease, error) {
	g.mu.Lock()
	g.asked = append(g.asked, fmt.Sprintf("%s %d->%d", proto, internal, external))
	down, port, lt, epoch := g.down, g.port, g.lifetime, g.epoch
	g.epoch++
	g.mu.Unlock()
	if down {
		<-ctx.Done()
		return Lease{}, ctx.Err()
	}
	if port == 0 {
		port = external
	}
	return Lease{Protocol: proto, Internal: internal, External: port, Lifetime: lt, Epoch: epoch}, nil
}

func (g *fakeGateway) set(f func(g *fakeGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

// fakeHost is the kill switch's forwarded sets and the recorded status.
type fakeHost struct {
	mu      sync.Mutex
	gen     uint64
	open    policy.Forwarded
	opens   []string // each Open that changed the sets
	records []Status
	// history is what the sets held over time, for invariants.
	refused int
}

func (h *fakeHost) Open(gen uint64, f policy.Forwarded) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen {
		h.refused++
		return errors.New("stale generation")
	}
	h.open = f
	h.opens = append(h.opens, f.String())
	return nil
}

func (h *fakeHost) Record(s Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, s)
}

func (h *fakeHost) last() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.records[len(h.records)-1]
}

func (h *fakeHost) snapshot() (open policy.Forwarded, opens []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, slices.Clone(h.opens)
}

// fakePusher records pushes; it fails its first fail pushes.
type fakePusher struct {
	name   string
	mu     sync.Mutex
	fail   int
	pushes []uint16
	host   *fakeHost // to check that the port is open before it is pushed
	closed []uint16  // pushes of a port the kill switch did not hold
}

func (p *fakePusher) Name() string { return p.name }
func (p *fakePusher) Push(_ context.Context, port uint16, _ []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail > 0 {
		p.fail--
		return errors.New("connection refused")
	}
	if open, _ := p.host.snapshot(); port != 0 && !slices.Contains(open.TCP, port) {
		p.closed = append(p.closed, port)
	}
	p.pushes = append(p.pushes, port)
	return nil
}

func (p *fakePusher) got() []uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pushes)
}

// fakeCommand is a fakePusher that says, as the onChange command does,
// how a push that worked ended.
type fakeCommand struct{ *fakePusher }

func (c fakeCommand) PushReport(ctx context.Context, port uint16, protocols []string) (string, error) {
	if err := c.Push(ctx, port, protocols); err != nil {
		return "", err
	}
	return fmt.Sprintf("exit code 0: output: told %d", port), nil
}

// logBuffer is what the manager logged.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type rig struct {
	gw      *fakeGateway
	host    *fakeHost
	app     *fakePusher
	cmd     *fakePusher // the OnChange, as a fakeCommand
	logs    *logBuffer
	m       *Manager
	cancel  context.CancelFunc
	stopped chan struct{}
}

func start(t *testing.T, style string, lifetime time.Duration) *rig {
	t.Helper()
	r := &rig{gw: &fakeGateway{port: 40001, lifetime: lifetime, epoch: 100}, host: &fakeHost{}}
	r.app = &fakePusher{name: "app", host: r.host}
	r.cmd = &fakePusher{name: "cmd", host: r.host}
	spec := &config.PortForwardSpec{Gateway: netip.MustParseAddr("10.2.0.1"), Style: style, Protocols: []string{"tcp", "udp"}, Lifetime: lifetime}
	if style == config.PortForwardRFC {
		spec.InternalPort = 6881
		r.gw.port = 0
	}
	r.logs = &logBuffer{}
	var w io.Writer = r.logs
	if testing.Verbose() {
		w = io.MultiWriter(r.logs, os.Stderr)
	}
	r.m = New(Options{
		Spec: spec, Host: r.host, Apps: []Pusher{r.app}, OnChange: fakeCommand{r.cmd}, Log: slog.New(slog.NewTextHandler(w, nil)), Backoff: 10 * time.Millisecond,
		Dial:      func(context.Context, netip.Addr) (Gateway, func(), error) { return r.gw, func() {}, nil },
		Restarted: func(prev uint32, _ time.Time, epoch uint32, _ time.Time) bool { return epoch < prev },
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.stopped = cancel, make(chan struct{})
	go func() { defer close(r.stopped); r.m.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *rig) stop() {
	r.cancel()
	<-r.stopped
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProtonGrantRenewChange(t *testing.T) {
	r := start(t, config.PortForwardProton, 400*time.Millisecond)
	eventually(t, "the first grant", func() bool { return r.m.Status().Port == 40001 })
	open, _ := r.host.snapshot()
	if open.String() != "tcp 40001, udp 40001" {
		t.Fatalf("kill switch holds %s", open)
	}
	// Renewals ask again the way natpmpc -a 1 0 does, keep the sets as
	// they are and push the applications again (not the command).
	eventually(t, "renewals", func() bool { return len(r.app.got()) >= 3 })
	_, opens := r.host.snapshot()
	if len(opens) != 1 {
		t.Fatalf("renewals changed the kill switch: %v", opens)
	}
	if got := r.cmd.got(); !slices.Equal(got, []uint16{40001}) {
		t.Fatalf("command pushed %v, want once 40001", got)
	}
	r.gw.mu.Lock()
	asked := slices.Clone(r.gw.asked)
	r.gw.mu.Unlock()
	for _, a := range asked {
		if !strings.HasSuffix(a, " 0->1") {
			t.Fatalf("proton style asked %q, want internal 0, external 1", a)
		}
	}

	// The gateway moves the port: one batch opens the new and closes the
	// old (no moment with both closed), then the port is pushed.
	r.gw.set(func(g *fakeGateway) { g.port = 40002 })
	eventually(t, "the new port", func() bool { return slices.Contains(r.cmd.got(), 40002) })
	_, opens = r.host.snapshot()
	if want := []string{"tcp 40001, udp 40001", "tcp 40002, udp 40002"}; !slices.Equal(opens, want) {
		t.Fatalf("kill switch changes %v, want %v", opens, want)
	}
	if r.app.closed != nil || r.cmd.closed != nil {
		t.Fatalf("a port was pushed before the kill switch opened it: %v %v", r.app.closed, r.cmd.closed)
	}
	if s := r.m.Status(); s.State != StateMapped || s.Port != 40002 || s.Expires.IsZero() {
		t.Fatalf("status %+v", s)
	}
}

// A gateway that stops answering: nothing more is opened, the lease runs
// out and the port is closed and announced lost; retries are spaced out.
func TestGatewayDownClosesAtExpiry(t *testing.T) {
	r := start(t, config.PortForwardProton, 600*time.Millisecond)
	eventually(t, "the first grant", func() bool { return r.m.Status().Port == 40001 })
	r.gw.set(func(g *fakeGateway) { g.down = true })
	eventually(t, "the port closed", func() bool { o, _ := r.host.snapshot(); return o.IsZero() })
	eventually(t, "the port announced lost", func() bool { return slices.Contains(r.cmd.got(), 0) })
	s := r.host.last()
	if s.Port != 0 || s.State != StateNotAnswering || !strings.Contains(s.Error, "deadline") {
		t.Fatalf("status after the lease ran out: %+v", s)
	}
	// The positive control of "nothing is opened while it is down": the
	// gateway back, the port opens again.
	_, before := r.host.snapshot()
	r.gw.set(func(g *fakeGateway) { g.down = false })
	eventually(t, "the port open again", func() bool { o, _ := r.host.snapshot(); return !o.IsZero() })
	_, after := r.host.snapshot()
	if want := append(before, "tcp 40001, udp 40001"); !slices.Equal(after, want) {
		t.Fatalf("kill switch changes %v, want %v", after, want)
	}
}

// A failover empties the sets with the old server's kill switch: the
// manager forgets the lease, announces it lost and asks the new gateway,
// and an Open for the old generation is refused.
func TestResetAfterFailover(t *testing.T) {
	r := start(t, config.PortForwardProton, 2*time.Second)
	eventually(t, "the first grant", func() bool { return r.m.Status().Port == 40001 })
	r.host.mu.Lock()
	r.host.gen, r.host.open = 1, policy.Forwarded{}
	r.host.mu.Unlock()
	r.gw.set(func(g *fakeGateway) { g.port = 40007 })
	spec := *r.m.o.Spec
	spec.Gateway = netip.MustParseAddr("10.3.0.1")
	r.m.Reset(1, &spec)
	eventually(t, "the new server's port", func() bool { return slices.Contains(r.cmd.got(), 40007) })
	if s := r.m.Status(); s.Gateway != "10.3.0.1" || s.Port != 40007 {
		t.Fatalf("status %+v", s)
	}
	// The loss is announced unless the new port came before the command
	// could be run for it (a queued push is replaced by a newer one).
	if got := r.cmd.got(); !slices.Equal(got, []uint16{40001, 0, 40007}) && !slices.Equal(got, []uint16{40001, 40007}) {
		t.Fatalf("command pushed %v, want 40001, (lost,) 40007", got)
	}
	if o, _ := r.host.snapshot(); o.String() != "tcp 40007, udp 40007" {
		t.Fatalf("kill switch holds %s", o)
	}
}

// A push that worked is logged at info; the command's, with what it
// said (exit code and output), as a failure is logged with its error.
func TestPushLogged(t *testing.T) {
	r := start(t, config.PortForwardProton, 400*time.Millisecond)
	eventually(t, "the command's push", func() bool { return len(r.cmd.got()) == 1 })
	// The port moves, and the command fails once: the failure is logged
	// with its error, and the retry that works with what it said.
	r.cmd.mu.Lock()
	r.cmd.fail = 1
	r.cmd.mu.Unlock()
	r.gw.set(func(g *fakeGateway) { g.port = 40002 })
	eventually(t, "the new port pushed", func() bool { return slices.Contains(r.cmd.got(), 40002) })
	eventually(t, "the log line", func() bool { return strings.Contains(r.logs.String(), "to=cmd port=40002") })
	logs := r.logs.String()
	for _, want := range []string{
		`level=INFO msg="forwarded port handed on" part="port forwarding" to=app port=40001` + "\n",
		`level=INFO msg="forwarded port handed on" part="port forwarding" to=cmd port=40001 result="exit code 0: output: told 40001"` + "\n",
		`level=WARN msg="cannot hand the forwarded port to cmd; retrying" part="port forwarding" port=40002 err="connection refused"` + "\n",
		`level=INFO msg="forwarded port handed on" part="port forwarding" to=cmd port=40002 result="exit code 0: output: told 40002"` + "\n",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line ending %s in:\n%s", want, logs)
		}
	}
}

func TestPushRetriedUntilItWorks(t *testing.T) {
	r := start(t, config.PortForwardProton, 10*time.Second)
	r.app.mu.Lock()
	r.app.fail = 3
	r.app.mu.Unlock()
	eventually(t, "the push", func() bool { return len(r.app.got()) == 1 })
	eventually(t, "no pending push", func() bool { return len(r.host.last().Pending) == 0 })
	if got := r.cmd.got(); len(got) != 1 {
		t.Fatalf("the command ran %v times for one port", got)
	}
}

// rfc style asks for the application's port and keeps asking for the
// external port the gateway gave; the kill switch opens the internal port.
func TestRFCStyle(t *testing.T) {
	r := start(t, config.PortForwardRFC, 300*time.Millisecond)
	r.gw.set(func(g *fakeGateway) { g.port = 50000 })
	eventually(t, "the grant", func() bool { return r.m.Status().Port == 6881 })
	eventually(t, "a renewal", func() bool { r.gw.mu.Lock(); defer r.gw.mu.Unlock(); return len(r.gw.asked) >= 4 })
	r.gw.mu.Lock()
	asked := slices.Clone(r.gw.asked)
	r.gw.mu.Unlock()
	if asked[0] != "tcp 6881->6881" || asked[2] != "tcp 6881->50000" {
		t.Fatalf("asked %v", asked)
	}
	if s := r.m.Status(); s.ExternalPort != 50000 {
		t.Fatalf("status %+v", s)
	}
	if o, _ := r.host.snapshot(); o.String() != "tcp 6881, udp 6881" {
		t.Fatalf("kill switch holds %s", o)
	}
}

// At shutdown the command hears that the port is lost, and Run returns.
func TestStopAnnouncesLost(t *testing.T) {
	r := start(t, config.PortForwardProton, 10*time.Second)
	eventually(t, "the grant", func() bool { return slices.Contains(r.cmd.got(), 40001) })
	r.stop()
	if got := r.cmd.got(); !slices.Equal(got, []uint16{40001, 0}) {
		t.Fatalf("command pushed %v", got)
	}
	if s := r.host.last(); s.State != StateStopped || s.Port != 0 {
		t.Fatalf("status %+v", s)
	}
}

func TestBackoffBounded(t *testing.T) {
	m := New(Options{Host: &fakeHost{}, Backoff: time.Second})
	var got []time.Duration
	for i := 1; i <= 10; i++ {
		got = append(got, m.backoff(i))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30, 30, 30}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff %v", got)
		}
	}
}
