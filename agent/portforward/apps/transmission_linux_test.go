package apps

import (
	"context"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/torrent"
)

func TestTransmissionPush(t *testing.T) {
	ctx := context.Background()
	for _, auth := range []bool{false, true} {
		name := map[bool]string{false: "no authentication", true: "authentication"}[auth]
		t.Run(name, func(t *testing.T) {
			ns := newNS(t)
			var creds *Credentials
			var owner *Owner
			o := torrent.Options{NS: ns, PortMap: !auth} // port mapping: once is enough to see it turned off
			if auth {
				creds = &Credentials{User: "alice", Password: testPassword}
				o.User, o.Password = creds.User, creds.Password
				owner = &Owner{UID: 0, Name: "root"} // the daemon runs as the test: the owner check passes
			}
			c := NamespaceHTTPClient(ns, owner)
			tr := torrent.NewTransmission(t, o)
			d := tr.Start(t, torrent.Launch{NS: ns})
			url := tr.URL()
			// Positive control for the listening check: the port it
			// chose at the start (random) is listened on.
			start, err := tr.Session()
			if err != nil {
				t.Fatal(err)
			}
			if start.PortForwarding != o.PortMap || !start.RandomOnStart || start.PeerPort == 0 {
				t.Fatalf("session-get before any push: %+v, want a random port and port mapping %v", start, o.PortMap)
			}
			d.WaitListening(t, start.PeerPort, true)

			p := NewTransmission(url, creds, c)
			if err := p.Push(ctx, 41001, []string{"tcp", "udp"}); err != nil {
				t.Fatal(err)
			}
			tr.Check(t, d, 41001)
			d.WaitListening(t, start.PeerPort, false)
			if err := p.Push(ctx, 41002, []string{"tcp", "udp"}); err != nil {
				t.Fatal(err)
			}
			tr.Check(t, d, 41002)
			// Port lost: nothing changes.
			if err := p.Push(ctx, 0, nil); err != nil {
				t.Fatal(err)
			}
			tr.Check(t, d, 41002)
			if !auth {
				return
			}
			err = NewTransmission(url, &Credentials{User: "alice", Password: "wrong-" + testPassword}, c).Push(ctx, 41003, nil)
			if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "wrong username or password for user alice") {
				t.Fatalf("wrong password: %v", err)
			}
			checkAppErr(t, err, "transmission "+url)
			err = NewTransmission(url, nil, c).Push(ctx, 41003, nil)
			if err == nil || !strings.Contains(err.Error(), "give credentialsFile") {
				t.Fatalf("no credentials: %v", err)
			}
			checkAppErr(t, err, "transmission "+url)
			tr.Check(t, d, 41002)
		})
	}
}

// TestTransmissionNotStarted: nothing listens yet, an error to retry.
func TestTransmissionNotStarted(t *testing.T) {
	ns := newNS(t)
	url := torrent.TransmissionURL
	err := NewTransmission(url, nil, NamespaceHTTPClient(ns, nil)).Push(context.Background(), 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("push to no Transmission: %v", err)
	}
	checkAppErr(t, err, "transmission "+url)
}
