package apps

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// The child mode of the test binary (TestMain): a listener as another
// user, recording what it is sent.
const (
	listenEnv      = "PF_OWNER_TEST_LISTEN"       // the address to listen on
	listenUIDEnv   = "PF_OWNER_TEST_UID"          // the uid (and gid) it drops to first
	listenDelayEnv = "PF_OWNER_TEST_ACCEPT_DELAY" // how long it leaves the connection in its queue
)

// listenerChild runs as the child: it drops to the uid (groups, gid,
// uid: every thread), listens, says "listening", accepts one connection
// (after the delay, if any), reads one HTTP request from it if one
// comes, answers 200, and writes every byte it was sent to stdout.
func listenerChild() int {
	uid, err := strconv.Atoi(os.Getenv(listenUIDEnv))
	if err == nil {
		err = errors.Join(syscall.Setgroups(nil), syscall.Setgid(uid), syscall.Setuid(uid))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drop to uid:", err)
		return 1
	}
	l, err := net.Listen("tcp", os.Getenv(listenEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening")
	if d, err := time.ParseDuration(os.Getenv(listenDelayEnv)); err == nil {
		time.Sleep(d)
	}
	c, err := l.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var raw bytes.Buffer
	if req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(c, &raw))); err == nil {
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nhi\n")
	}
	c.Close()
	os.Stdout.Write(raw.Bytes())
	return 0
}

// startListener starts the test binary as a listener on addr in ns that
// runs as uid, waits until it listens, and returns a function that waits
// for it to end and returns what it was sent.
func startListener(t *testing.T, ns, addr string, uid int, acceptDelay time.Duration) (received func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{listenEnv + "=" + addr, listenUIDEnv + "=" + strconv.Itoa(uid), listenDelayEnv + "=" + acceptDelay.String()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(ns, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); line != "listening\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("listener as uid %d on %s: %q %v: %s", uid, addr, line, err, stderr.String())
	}
	// Its uid as the kernel sees it: the control that the process is not root.
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err != nil || !strings.Contains(string(st), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid)) {
		t.Fatalf("the listener does not run as uid %d (%v)", uid, err)
	}
	return func() string {
		b, err := io.ReadAll(r)
		if werr := cmd.Wait(); err != nil || werr != nil {
			t.Fatalf("listener: %v %v: %s", err, werr, stderr.String())
		}
		return string(b)
	}
}

// TestOwnerCheckRealListener is issue 20's finding 5 with a real
// listener: a process as nobody binds the application's port in the
// namespace first. With the application's user set to another uid, the
// agent's push is refused naming the listener's owner, and the listener
// receives no byte, so no credential. The positive control: the same
// listener, when it is the configured user's, receives the request with
// the credential. Each case is run with the connection accepted at once
// (the accepted socket's uid decides) and, for Transmission, left in the
// listener's queue a while (the listener's uid decides), on 127.0.0.1
// and on the dual-stack wildcard (the far end is an IPv6 socket with a
// v4-mapped address).
func TestOwnerCheckRealListener(t *testing.T) {
	const nobody = 65534
	creds := &Credentials{User: "alice", Password: testPassword}
	basic := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(creds.User+":"+creds.Password))
	type pusher func(url string, c *http.Client) Pusher
	tr := func(u string, c *http.Client) Pusher { return NewTransmission(u, creds, c) }
	qb := func(u string, c *http.Client) Pusher { return NewQBittorrent(u, creds, c) }
	for _, tc := range []struct {
		name, bind, url string
		delay           time.Duration
		push            pusher
		secret          string // what the request carries of the credential
	}{
		{"transmission", "127.0.0.1:9091", "http://127.0.0.1:9091/transmission/rpc", 0, tr, basic},
		{"transmission queued", "127.0.0.1:9091", "http://127.0.0.1:9091/transmission/rpc", time.Second, tr, basic},
		{"transmission dual-stack", ":9091", "http://127.0.0.1:9091/transmission/rpc", 0, tr, basic},
		{"qbittorrent", "127.0.0.1:8080", "http://127.0.0.1:8080", 0, qb, "password=" + url.QueryEscape(creds.Password)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNS(t)
			ctx := context.Background()
			// Refused: the application runs as daemon (uid 1), nobody listens.
			received := startListener(t, ns, tc.bind, nobody, tc.delay)
			want := &Owner{UID: 1, Name: "daemon"}
			err := tc.push(tc.url, NamespaceHTTPClient(ns, want)).Push(ctx, 41001, nil)
			if got := received(); got != "" {
				t.Fatalf("nobody's listener received %d bytes (push: %v):\n%s", len(got), err, got)
			}
			var oe *OwnerError
			if !errors.As(err, &oe) || oe.UID != nobody || !strings.Contains(err.Error(), "belongs to uid 65534 (nobody), not to daemon (uid 1)") {
				t.Fatalf("push to nobody's listener: %v, want refused naming uid 65534 (nobody)", err)
			}
			checkAppErr(t, err, strings.Fields(tc.name)[0]+" "+tc.url)

			// Positive control: the same listener, the application's user's.
			received = startListener(t, ns, tc.bind, nobody, tc.delay)
			err = tc.push(tc.url, NamespaceHTTPClient(ns, &Owner{UID: nobody, Name: "nobody"})).Push(ctx, 41001, nil)
			if errors.As(err, &oe) {
				t.Fatalf("push to the application user's listener refused: %v", err)
			}
			if got := received(); !strings.Contains(got, tc.secret) {
				t.Fatalf("the application user's listener did not receive the credential (push: %v):\n%s", err, got)
			}
		})
	}
}

// TestPeerOwner: which socket's uid decides, from a sock_diag listing.
func TestPeerOwner(t *testing.T) {
	local, remote := netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:9091")
	sock := func(state uint8, src string, sport uint16, dst string, dport uint16, uid, inode uint32) *netlink.Socket {
		return &netlink.Socket{State: state, UID: uid, INode: inode, ID: netlink.SocketID{
			Source: net.ParseIP(src), SourcePort: sport, Destination: net.ParseIP(dst), DestinationPort: dport}}
	}
	ours := sock(tcpEstablished, "127.0.0.1", 40000, "127.0.0.1", 9091, 0, 7)
	accepted := sock(tcpEstablished, "127.0.0.1", 9091, "127.0.0.1", 40000, 101, 8)
	queued := sock(tcpEstablished, "127.0.0.1", 9091, "127.0.0.1", 40000, 0, 0) // uid 0 before 6.16
	mapped := sock(tcpEstablished, "::ffff:127.0.0.1", 9091, "::ffff:127.0.0.1", 40000, 101, 8)
	lApp := sock(tcpListen, "127.0.0.1", 9091, "0.0.0.0", 0, 101, 9)
	lNobody := sock(tcpListen, "::", 9091, "::", 0, 65534, 10)
	lOther := sock(tcpListen, "127.0.0.1", 8080, "0.0.0.0", 0, 65534, 11)
	timeWait := sock(6, "127.0.0.1", 9091, "127.0.0.1", 40000, 0, 0)
	for _, tc := range []struct {
		name  string
		socks []*netlink.Socket
		uid   uint32
		err   string
	}{
		{"accepted: its uid", []*netlink.Socket{ours, lNobody, accepted}, 101, ""},
		{"accepted, v4-mapped", []*netlink.Socket{ours, mapped}, 101, ""},
		{"queued: the listener's uid", []*netlink.Socket{ours, queued, lApp, lOther}, 101, ""},
		{"queued: listeners of two users", []*netlink.Socket{ours, queued, lApp, lNobody}, 0, "belong to uid 101 and uid 65534"},
		{"queued: no listener", []*netlink.Socket{ours, queued, lOther}, 0, "no listener on port 9091"},
		{"no far end", []*netlink.Socket{ours, lApp}, 0, "no established socket"},
		{"far end not established", []*netlink.Socket{ours, timeWait, lApp}, 0, "no established socket"},
	} {
		uid, err := peerOwner(tc.socks, local, remote)
		if tc.err == "" && (err != nil || uid != tc.uid) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: uid %d, %v; want uid %d, error %q", tc.name, uid, err, tc.uid, tc.err)
		}
	}
}
