package apps

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// trSession is what the test reads back with Transmission's own
// session-get.
type trSession struct {
	PeerPort       uint16 `json:"peer-port"`
	PortForwarding bool   `json:"port-forwarding-enabled"`
	RandomOnStart  bool   `json:"peer-port-random-on-start"`
}

// startTransmission runs transmission-daemon in ns with its RPC on
// 127.0.0.1:9091, asking for user:password when user is not "", and its
// own port mapping (NAT-PMP, UPnP) on when portmap.
func startTransmission(t *testing.T, ns, user, password string, portmap bool) (*daemon, string) {
	bin := needTool(t, "transmission-daemon")
	dir := t.TempDir()
	settings := map[string]any{
		"rpc-bind-address": "127.0.0.1", "rpc-port": 9091,
		"rpc-authentication-required": user != "", "rpc-username": user, "rpc-password": password,
		"rpc-whitelist-enabled": true, "rpc-whitelist": "127.0.0.1",
		"download-dir": filepath.Join(dir, "downloads"), "incomplete-dir-enabled": false,
		"dht-enabled": false, "lpd-enabled": false, "utp-enabled": false, "pex-enabled": false,
		// What the push turns off, on to begin with. Turning the port
		// mapping off takes Transmission 2 s (its UPnP discovery timeout).
		"port-forwarding-enabled": portmap, "peer-port-random-on-start": true,
	}
	writeFile(t, filepath.Join(dir, "config", "settings.json"), must(json.Marshal(settings)))
	d := startIn(t, ns, []string{"HOME=" + dir}, bin, "-f", "-g", filepath.Join(dir, "config"), "--log-error")
	url := "http://127.0.0.1:9091/transmission/rpc"
	waitHTTP(t, NamespaceHTTPClient(ns), url)
	return d, url
}

// trGet reads the session with session-get, as a user of the RPC would
// (its own session id dance).
func trGet(t *testing.T, c *http.Client, url string, creds *Credentials) trSession {
	t.Helper()
	var out struct {
		Result    string    `json:"result"`
		Arguments trSession `json:"arguments"`
	}
	sid := ""
	for range 2 {
		req := must(http.NewRequest(http.MethodPost, url, strings.NewReader(`{"method":"session-get"}`)))
		req.Header.Set(sessionIDHeader, sid)
		if creds != nil {
			req.SetBasicAuth(creds.User, creds.Password)
		}
		resp, err := doJSON(c, req, &out)
		if err != nil {
			t.Fatalf("session-get: %v", err)
		}
		if resp.StatusCode != http.StatusConflict {
			if resp.StatusCode != http.StatusOK || out.Result != "success" {
				t.Fatalf("session-get: HTTP %d, result %q", resp.StatusCode, out.Result)
			}
			return out.Arguments
		}
		sid = resp.Header.Get(sessionIDHeader)
	}
	t.Fatal("session-get: 409 twice")
	return trSession{}
}

// checkTransmission asserts Transmission's peer port is port (read back
// with session-get), its own port mapping off, and that it listens there.
func checkTransmission(t *testing.T, d *daemon, c *http.Client, url string, creds *Credentials, port uint16) {
	t.Helper()
	got := trGet(t, c, url, creds)
	if want := (trSession{PeerPort: port}); got != want {
		t.Fatalf("session-get after pushing %d: %+v, want %+v", port, got, want)
	}
	waitListening(t, d.cmd.Process.Pid, port, true)
}

func TestTransmissionPush(t *testing.T) {
	ctx := context.Background()
	for _, auth := range []bool{false, true} {
		name := map[bool]string{false: "no authentication", true: "authentication"}[auth]
		t.Run(name, func(t *testing.T) {
			ns := newNS(t)
			var creds *Credentials
			if auth {
				creds = &Credentials{User: "alice", Password: testPassword}
			}
			user, pw := "", ""
			if creds != nil {
				user, pw = creds.User, creds.Password
			}
			c := NamespaceHTTPClient(ns)
			portmap := !auth // once is enough to see it turned off
			d, url := startTransmission(t, ns, user, pw, portmap)
			// Positive control for the listening check: the port it
			// chose at the start (random) is listened on.
			start := trGet(t, c, url, creds)
			if start.PortForwarding != portmap || !start.RandomOnStart || start.PeerPort == 0 {
				t.Fatalf("session-get before any push: %+v, want a random port and port mapping %v", start, portmap)
			}
			waitListening(t, d.cmd.Process.Pid, start.PeerPort, true)

			p := NewTransmission(url, creds, c)
			if err := p.Push(ctx, 41001, []string{"tcp", "udp"}); err != nil {
				t.Fatal(err)
			}
			checkTransmission(t, d, c, url, creds, 41001)
			waitListening(t, d.cmd.Process.Pid, start.PeerPort, false)
			if err := p.Push(ctx, 41002, []string{"tcp", "udp"}); err != nil {
				t.Fatal(err)
			}
			checkTransmission(t, d, c, url, creds, 41002)
			// Port lost: nothing changes.
			if err := p.Push(ctx, 0, nil); err != nil {
				t.Fatal(err)
			}
			checkTransmission(t, d, c, url, creds, 41002)
			if !auth {
				return
			}
			err := NewTransmission(url, &Credentials{User: "alice", Password: "wrong-" + testPassword}, c).Push(ctx, 41003, nil)
			if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "wrong username or password for user alice") {
				t.Fatalf("wrong password: %v", err)
			}
			checkAppErr(t, err, "transmission "+url)
			err = NewTransmission(url, nil, c).Push(ctx, 41003, nil)
			if err == nil || !strings.Contains(err.Error(), "give credentialsFile") {
				t.Fatalf("no credentials: %v", err)
			}
			checkAppErr(t, err, "transmission "+url)
			checkTransmission(t, d, c, url, creds, 41002)
		})
	}
}

// TestTransmissionNotStarted: nothing listens yet, an error to retry.
func TestTransmissionNotStarted(t *testing.T) {
	ns := newNS(t)
	url := "http://127.0.0.1:9091/transmission/rpc"
	err := NewTransmission(url, nil, NamespaceHTTPClient(ns)).Push(context.Background(), 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("push to no Transmission: %v", err)
	}
	checkAppErr(t, err, "transmission "+url)
}
