package apps

import (
	"context"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/torrent"
)

// startQBittorrent runs qbittorrent-nox in ns for alice, with the
// Preferences lines extra.
func startQBittorrent(t *testing.T, ns, extra string) (*torrent.QBittorrent, *torrent.Daemon) {
	q := torrent.NewQBittorrent(t, torrent.Options{NS: ns, User: "alice", Password: testPassword, Extra: extra})
	return q, q.Start(t, torrent.Launch{NS: ns})
}

func TestQBittorrentPush(t *testing.T) {
	ctx := context.Background()
	ns := newNS(t)
	creds := Credentials{User: "alice", Password: testPassword}
	c := NamespaceHTTPClient(ns, nil)
	q, d := startQBittorrent(t, ns, "")
	url := q.URL()
	// Positive control for the read back and the listening check.
	if got, err := q.Preferences(); err != nil || got != (torrent.QBittorrentPrefs{ListenPort: torrent.QBittorrentPort, UPnP: true}) {
		t.Fatalf("preferences before any push: %+v, %v; want port %d and UPnP on", got, err, torrent.QBittorrentPort)
	}
	d.WaitListening(t, torrent.QBittorrentPort, true)

	p := NewQBittorrent(url, &creds, c)
	if err := p.Push(ctx, 41011, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	q.Check(t, d, 41011)
	d.WaitListening(t, torrent.QBittorrentPort, false)
	if err := p.Push(ctx, 41012, nil); err != nil {
		t.Fatal(err)
	}
	q.Check(t, d, 41012)
	if err := p.Push(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	q.Check(t, d, 41012)

	err := NewQBittorrent(url, &Credentials{User: "alice", Password: "wrong-" + testPassword}, c).Push(ctx, 41013, nil)
	if err == nil || !strings.Contains(err.Error(), "login: wrong username or password for user alice") {
		t.Fatalf("wrong password: %v", err)
	}
	checkAppErr(t, err, "qbittorrent "+url)
	err = NewQBittorrent(url, nil, c).Push(ctx, 41013, nil)
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "give credentialsFile") {
		t.Fatalf("no credentials: %v", err)
	}
	checkAppErr(t, err, "qbittorrent "+url)
	q.Check(t, d, 41012)

	// qBittorrent restarted: the pusher's session is gone, it logs in
	// again (once) and the push goes through.
	d.Stop()
	d = q.Start(t, torrent.Launch{NS: ns})
	if err := p.Push(ctx, 41014, nil); err != nil {
		t.Fatalf("push after a restart: %v", err)
	}
	q.Check(t, d, 41014)
}

// TestQBittorrentLocalHostBypass: qBittorrent set to let localhost in
// without a login ("Bypass authentication for clients on localhost"),
// the pusher without credentials.
func TestQBittorrentLocalHostBypass(t *testing.T) {
	ns := newNS(t)
	q, d := startQBittorrent(t, ns, "WebUI\\LocalHostAuth=false\n")
	if err := NewQBittorrent(q.URL(), nil, NamespaceHTTPClient(ns, nil)).Push(context.Background(), 41031, nil); err != nil {
		t.Fatal(err)
	}
	q.Check(t, d, 41031)
}

// TestQBittorrentNotStarted: nothing listens yet, an error to retry.
func TestQBittorrentNotStarted(t *testing.T) {
	ns := newNS(t)
	err := NewQBittorrent(torrent.QBittorrentURL, &Credentials{User: "alice", Password: testPassword}, NamespaceHTTPClient(ns, nil)).Push(context.Background(), 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("push to no qBittorrent: %v", err)
	}
	checkAppErr(t, err, "qbittorrent "+torrent.QBittorrentURL)
}
