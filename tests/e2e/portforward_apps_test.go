package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/torrent"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 14 with the real clients: transmission-daemon and qbittorrent-nox
// confined with `vpn-agent exec NAME --` after the agent is up (so its
// first pushes fail and are retried), each told the forwarded port by the
// agent, reporting it through its own API, listening on it, and reached
// there from the internet through the provider and the tunnel.

// The ports the provider's NAT-PMP gateway gives (testbed/provider: the
// first free from 40000; ChangePort moves to the next).
const (
	firstForwarded  = 40000
	secondForwarded = 40001
)

// confinedApp is a client under test: how to start it (with its config
// as it is on disk), give it a torrent, and read the listening port its
// own API reports.
type confinedApp struct {
	name  string // the pusher's, as status's pending names it
	start func(testing.TB, torrent.Launch) *torrent.Daemon
	add   func(testing.TB, torrent.Torrent)
	port  func() (uint16, error)
	check func(testing.TB, *torrent.Daemon, uint16)
}

// startWith starts a confined and gives it a torrent of its own.
func (c *confined) startWith(t *testing.T, a confinedApp) (*torrent.Daemon, torrent.Torrent) {
	t.Helper()
	d := a.start(t, c.launch())
	tor := torrent.NewTorrent()
	a.add(t, tor)
	return d, tor
}

// launch confines a command the way a user runs it: `vpn-agent exec
// NAME -- ...` in the simulated host (exec replaces itself with the
// command: the daemon's PID is the process started).
func (c *confined) launch() torrent.Launch {
	return torrent.Launch{NS: c.tp.Host, Prefix: []string{env.agentBin, "exec", c.name, "--"}}
}

// startForwarding runs the agent, waits for the gateway's first port and
// for the push to a's API, which is not started yet, to fail; checks that
// the internet's connection to the port opened in the kill switch is
// refused with nothing listening (the negative control of peerReaches);
// then starts a confined, gives it a torrent and waits until its API
// reports the port.
func (c *confined) startForwarding(t *testing.T, a confinedApp) (*torrent.Daemon, torrent.Torrent) {
	t.Helper()
	c.d = c.ag.Run(t, c.path)
	c.waitForwarded(t, firstForwarded, "mapped", 20*time.Second)
	st := c.waitPending(t, a.name, 10*time.Second)
	t.Logf("before %s starts, status says pending %q", a.name, st.PortForward.Pending)
	c.peerBlocked(t, firstForwarded, "nothing listening yet")

	before := c.requests(t)
	d, tor := c.startWith(t, a)
	c.waitAppPort(t, a, firstForwarded)
	if c.requests(t) == before {
		t.Logf("%s was given the port by a retry: no renewal came in between", a.name)
	} else {
		t.Logf("%s was given the port by a retry or a renewal", a.name)
	}
	c.forwardedTo(t, a, d, tor, firstForwarded)
	return d, tor
}

// requests is how many NAT-PMP requests the agent made so far (status's
// portForward.requests): two a round here, one per protocol.
func (c *confined) requests(t *testing.T) float64 {
	t.Helper()
	st, o, err := c.ag.Status(c.name)
	pf, _ := st["portForward"].(map[string]any)
	n, ok := pf["requests"].(float64)
	if err != nil || !ok {
		t.Fatalf("status: no portForward.requests (%v):\n%s", err, o.String())
	}
	return n
}

// forwardedTo waits until a's API reports port and asserts that its
// process d listens there, that status has nothing pending, and that the
// internet reaches it there.
func (c *confined) forwardedTo(t *testing.T, a confinedApp, d *torrent.Daemon, tor torrent.Torrent, port uint16) {
	t.Helper()
	c.waitAppPort(t, a, port)
	a.check(t, d, port)
	c.waitPushed(t, port)
	c.peerReaches(t, d, tor, port)
}

// restart kills a's process and starts it again from its config on disk
// (onDisk checks that the config still has its old port), and asserts
// that the agent pushes the port again: a push that failed while the
// application was down is retried, and every renewal pushes.
func (c *confined) restart(t *testing.T, a confinedApp, d *torrent.Daemon, port uint16, onDisk func()) (*torrent.Daemon, torrent.Torrent) {
	t.Helper()
	d.Stop()
	onDisk()
	d = a.start(t, c.launch())
	if got, err := a.port(); err == nil {
		t.Logf("%s restarted, reporting port %d", a.name, got) // the forwarded port if the agent was quicker than this read
	}
	tor := torrent.NewTorrent()
	a.add(t, tor)
	c.forwardedTo(t, a, d, tor, port)
	return d, tor
}

// waitAppPort waits until a's API reports port as its listening port
// (the agent retries a failed push with backoff and pushes again at
// every renewal, 5 s here).
func (c *confined) waitAppPort(t *testing.T, a confinedApp, port uint16) {
	t.Helper()
	err := torrent.Poll(30*time.Second, func() error {
		got, err := a.port()
		if err == nil && got != port {
			err = fmt.Errorf("%s reports port %d", a.name, got)
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s was not given port %d: %v\nagent output:\n%s", a.name, port, err, c.d.Output())
	}
}

// waitPending waits until status says the push to app is pending.
func (c *confined) waitPending(t *testing.T, app string, within time.Duration) forwardStatus {
	t.Helper()
	var st forwardStatus
	err := torrent.Poll(within, func() error {
		st = c.forwardStatus(t)
		if st.PortForward != nil {
			for _, p := range st.PortForward.Pending {
				if strings.HasPrefix(p, app+": ") {
					return nil
				}
			}
		}
		return fmt.Errorf("status: %+v %+v", st, st.PortForward)
	})
	if err != nil {
		t.Fatalf("no pending push to %s: %v", app, err)
	}
	return st
}

// waitPushed waits until status reports port, mapped, with no push
// pending.
func (c *confined) waitPushed(t *testing.T, port uint16) {
	t.Helper()
	err := torrent.Poll(15*time.Second, func() error {
		st := c.forwardStatus(t)
		if st.ForwardedPort != port || st.PortForward == nil || st.PortForward.State != "mapped" || len(st.PortForward.Pending) > 0 {
			return fmt.Errorf("status: %+v %+v", st, st.PortForward)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("want port %d mapped and nothing pending: %v", port, err)
	}
}

// peerReaches connects from the internet to the provider's public
// address at port, as a remote peer would, and fails t unless the
// application d answers a handshake for tor with its own (a client takes
// a moment to take peers for a torrent just added) and holds the
// connection open itself.
func (c *confined) peerReaches(t *testing.T, d *torrent.Daemon, tor torrent.Torrent, port uint16) {
	t.Helper()
	addr := harness.AP(testbed.Endpoint4, int(port))
	var (
		p  *torrent.Peer
		id []byte
	)
	err := torrent.Poll(20*time.Second, func() (err error) {
		if p, err = torrent.DialPeer(c.tp.Inet, addr, time.Second); err != nil {
			return err
		}
		if id, err = p.Handshake(tor.InfoHash, 5*time.Second); err != nil {
			p.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("the internet does not reach the application at %v: %v", addr, err)
	}
	defer p.Close()
	if n, err := d.Accepted(port); err != nil || n == 0 {
		t.Fatalf("a BitTorrent client answered at %v, but process %d holds no connection on port %d (%d, %v)", addr, d.Pid(), port, n, err)
	}
	t.Logf("the internet reached the application (process %d, peer id %q) at %v", d.Pid(), id, addr)
}

// peerBlocked fails t if the internet connects to the provider's public
// address at port.
func (c *confined) peerBlocked(t *testing.T, port uint16, why string) {
	t.Helper()
	addr := harness.AP(testbed.Endpoint4, int(port))
	p, err := torrent.DialPeer(c.tp.Inet, addr, 2*time.Second)
	if err == nil {
		p.Close()
		t.Fatalf("%s, yet the internet connected to %v", why, addr)
	}
	t.Logf("%s: %v", why, err)
}

// TestPortForwardTransmission: Transmission without RPC authentication
// (its own port mapping on, which the push turns off); a port change by
// the gateway: the new port is pushed, listened on and reached, the old
// one no longer; a restart from its settings on disk (a random port).
func TestPortForwardTransmission(t *testing.T) {
	t.Parallel()
	requireAgent(t)
	c := newForwarded(t, provider.StyleProton, &config.PortForwarding{
		NATPMP: &config.NATPMP{Lifetime: forwardLifetime},
		// The daemon runs as root (vpn-agent exec without --user): the
		// owner check runs, with no credentials to guard.
		Transmission: &config.App{URL: torrent.TransmissionURL, User: "root"},
	}, harness.AgentOptions{})
	tr := torrent.NewTransmission(t, torrent.Options{NS: c.name, PortMap: true})
	a := confinedApp{name: "transmission", start: tr.Start, add: tr.Add, check: tr.Check, port: func() (uint16, error) {
		s, err := tr.Session()
		return s.PeerPort, err
	}}
	d, tor := c.startForwarding(t, a)

	if err := c.tp.NATPMP().ChangePort(); err != nil {
		t.Fatal(err)
	}
	c.waitForwarded(t, secondForwarded, "mapped", 15*time.Second)
	c.forwardedTo(t, a, d, tor, secondForwarded)
	d.WaitListening(t, firstForwarded, false)
	c.peerBlocked(t, firstForwarded, "the old port after the move")

	// Restarted after a SIGKILL: Transmission saves its settings only at
	// exit, so settings.json still asks for a random port at start.
	c.restart(t, a, d, secondForwarded, func() {
		if s := tr.Settings(t); s["peer-port-random-on-start"] != true {
			t.Fatalf("settings.json before the restart: peer-port-random-on-start %v, want true", s["peer-port-random-on-start"])
		}
	})
}

// TestPortForwardQBittorrent: qBittorrent with a credentials file, then
// restarted with its old port: the agent logs in again and pushes the
// port again.
func TestPortForwardQBittorrent(t *testing.T) {
	t.Parallel()
	requireAgent(t)
	const user, password = "alice", "e2e-s3cret:pa55"
	creds := t.TempDir() + "/qbittorrent.credentials"
	if err := os.WriteFile(creds, []byte(user+":"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newForwarded(t, provider.StyleProton, &config.PortForwarding{
		NATPMP:      &config.NATPMP{Lifetime: forwardLifetime},
		QBittorrent: &config.App{URL: torrent.QBittorrentURL, CredentialsFile: creds, User: "0"}, // the daemon runs as root
	}, harness.AgentOptions{})
	q := torrent.NewQBittorrent(t, torrent.Options{NS: c.name, User: user, Password: password})
	a := confinedApp{name: "qbittorrent", start: q.Start, add: q.Add, check: q.Check, port: func() (uint16, error) {
		p, err := q.Preferences()
		return p.ListenPort, err
	}}
	d, _ := c.startForwarding(t, a)

	// Restarted: qBittorrent saves a pushed port in its profile at once
	// (Session\Port=40000 there after a SIGKILL), so it comes back from a
	// profile restored with its old port, and only a push moves it (the
	// agent's session cookie is stale too: it logs in again).
	d, _ = c.restart(t, a, d, firstForwarded, func() {
		q.WriteConfig(t)
		if conf, want := q.Config(t), fmt.Sprintf("Session\\Port=%d\n", torrent.QBittorrentPort); !strings.Contains(conf, want) {
			t.Fatalf("qBittorrent's config before the restart has no %q:\n%s", want, conf)
		}
	})
	d.WaitListening(t, torrent.QBittorrentPort, false)
	if strings.Contains(c.d.Output(), password) {
		t.Error("the agent's log shows qBittorrent's password")
	}
}

// squatScript is a listener that prints every byte it is sent: one
// connection after another, on 127.0.0.1 at the port given.
const squatScript = `use IO::Socket::INET; $| = 1;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1) or die "listen: $!";
print STDERR "listening\n";
while (my $c = $s->accept) { while (sysread($c, my $b, 65536)) { print $b } close $c }`

// TestPortForwardCredentialsSquatter is issue 20's finding 5: a confined
// process as nobody (`vpn-agent exec --user nobody`) binds qBittorrent's
// Web UI port before qBittorrent starts. The agent, told qBittorrent runs
// as root, sends it nothing: no login, no password; status shows the
// push pending, naming nobody. The positive control: once the squatter
// is gone, the real qBittorrent (root's) is logged in to and given the
// port.
func TestPortForwardCredentialsSquatter(t *testing.T) {
	t.Parallel()
	requireAgent(t)
	const user, password = "alice", "e2e-squat-s3cret"
	creds := t.TempDir() + "/qbittorrent.credentials"
	if err := os.WriteFile(creds, []byte(user+":"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newForwarded(t, provider.StyleProton, &config.PortForwarding{
		NATPMP:      &config.NATPMP{Lifetime: forwardLifetime},
		QBittorrent: &config.App{URL: torrent.QBittorrentURL, CredentialsFile: creds, User: "root"},
	}, harness.AgentOptions{})
	q := torrent.NewQBittorrent(t, torrent.Options{NS: c.name, User: user, Password: password})

	// The squatter, confined as nobody, before the agent's first push.
	perl := torrent.NeedTool(t, "perl")
	cmd := exec.Command(env.agentBin, "exec", "--user", "nobody", c.name, "--", perl, "-e", squatScript, "8080") // torrent.QBittorrentURL's
	var got, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &got, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second // Wait returns even if a process in the group outlived the kill
	c.d = c.ag.Run(t, c.path)
	c.waitForwarded(t, firstForwarded, "mapped", 20*time.Second)
	if err := testbed.Start(c.tp.Host, cmd); err != nil {
		t.Fatal(err)
	}
	stop := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }
	t.Cleanup(stop)
	if err := torrent.Poll(10*time.Second, func() error {
		if !strings.Contains(stderr.String(), "listening") {
			return fmt.Errorf("squatter: %q", stderr.String())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Refused, naming the squatter's owner, for at least two tries.
	var pending string
	err := torrent.Poll(30*time.Second, func() error {
		st := c.forwardStatus(t)
		if st.PortForward != nil {
			for _, p := range st.PortForward.Pending {
				if strings.HasPrefix(p, "qbittorrent: ") && strings.Contains(p, "belongs to uid 65534 (nobody), not to root (uid 0)") {
					pending = p
					return nil
				}
			}
		}
		return fmt.Errorf("status: %+v", st.PortForward)
	})
	if s := got.String(); strings.Contains(s, url.QueryEscape(password)) {
		t.Fatalf("the squatter as nobody received qBittorrent's password:\n%s", s)
	}
	if err != nil {
		t.Fatalf("no pending push naming the squatter: %v\nthe squatter received %q\nagent output:\n%s", err, got.String(), c.d.Output())
	}
	t.Logf("status says pending %q", pending)
	before := c.requests(t)
	if err := torrent.Poll(30*time.Second, func() error {
		if c.requests(t) < before+2 {
			return errors.New("no renewal yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stop()
	if s := got.String(); s != "" {
		t.Fatalf("the squatter as nobody received %d bytes:\n%s", len(s), s)
	}
	if strings.Contains(c.d.Output(), password) {
		t.Error("the agent's log shows qBittorrent's password")
	}

	// Positive control: the real qBittorrent, root's, is logged in to
	// and given the port.
	d, tor := c.startWith(t, confinedApp{name: "qbittorrent", start: q.Start, add: q.Add})
	a := confinedApp{name: "qbittorrent", start: q.Start, add: q.Add, check: q.Check, port: func() (uint16, error) {
		p, err := q.Preferences()
		return p.ListenPort, err
	}}
	c.forwardedTo(t, a, d, tor, firstForwarded)
}

// syncBuffer is a bytes.Buffer a process's output can be written to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
