package apps

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// qbPassword is qBittorrent 4.5's WebUI\Password_PBKDF2 for password:
// PBKDF2-HMAC-SHA512, 100000 iterations, a 16-byte salt, a 64-byte key.
func qbPassword(t *testing.T, password string) string {
	salt := make([]byte, 16)
	rand.Read(salt)
	key, err := pbkdf2.Key(sha512.New, password, salt, 100000, 64)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`"@ByteArray(%s:%s)"`, base64.StdEncoding.EncodeToString(salt), base64.StdEncoding.EncodeToString(key))
}

// startQBittorrent runs qbittorrent-nox in ns with a profile in dir (made
// when dir is ""), its Web UI on 127.0.0.1:8080 for user:password, plus
// the Preferences lines extra. The legal notice is accepted in the
// config: 4.5 has no --confirm-legal-notice and would wait for a key
// press.
func startQBittorrent(t *testing.T, ns, dir, user, password, extra string) (*daemon, string, string) {
	bin := needTool(t, "qbittorrent-nox")
	if dir == "" {
		dir = t.TempDir()
		conf := "[LegalNotice]\nAccepted=true\n\n" +
			"[BitTorrent]\nSession\\Port=51413\n\n" +
			"[Preferences]\nWebUI\\Address=127.0.0.1\nWebUI\\Port=8080\n" +
			"WebUI\\Username=" + user + "\nWebUI\\Password_PBKDF2=" + qbPassword(t, password) + "\n" + extra
		writeFile(t, filepath.Join(dir, "qBittorrent", "config", "qBittorrent.conf"), []byte(conf))
	}
	d := startIn(t, ns, []string{"HOME=" + dir}, bin, "--profile="+dir)
	url := "http://127.0.0.1:8080"
	waitHTTP(t, NamespaceHTTPClient(ns), url+"/api/v2/app/version")
	return d, url, dir
}

// qbPreferences reads the preferences back with qBittorrent's own API,
// logged in as a user of it would be.
func qbPreferences(t *testing.T, c *http.Client, base string, creds Credentials) qbPrefs {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cj := *c
	cj.Jar = jar
	resp, err := cj.PostForm(base+"/api/v2/auth/login", url.Values{"username": {creds.User}, "password": {creds.Password}})
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	resp.Body.Close()
	var prefs qbPrefs
	req := must(http.NewRequest(http.MethodGet, base+"/api/v2/app/preferences", nil))
	if resp, err = doJSON(&cj, req, &prefs); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("app/preferences: %v %v", resp, err)
	}
	return prefs
}

func checkQBittorrent(t *testing.T, d *daemon, c *http.Client, url string, creds Credentials, port uint16) {
	t.Helper()
	if got, want := qbPreferences(t, c, url, creds), (qbPrefs{ListenPort: port}); got != want {
		t.Fatalf("preferences after pushing %d: %+v, want %+v", port, got, want)
	}
	waitListening(t, d.cmd.Process.Pid, port, true)
}

func TestQBittorrentPush(t *testing.T) {
	ctx := context.Background()
	ns := newNS(t)
	creds := Credentials{User: "alice", Password: testPassword}
	c := NamespaceHTTPClient(ns)
	d, url, dir := startQBittorrent(t, ns, "", creds.User, creds.Password, "")
	// Positive control for the read back and the listening check.
	if got := qbPreferences(t, c, url, creds); got != (qbPrefs{ListenPort: 51413, UPnP: true}) {
		t.Fatalf("preferences before any push: %+v, want port 51413 and UPnP on", got)
	}
	waitListening(t, d.cmd.Process.Pid, 51413, true)

	p := NewQBittorrent(url, &creds, c)
	if err := p.Push(ctx, 41011, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	checkQBittorrent(t, d, c, url, creds, 41011)
	waitListening(t, d.cmd.Process.Pid, 51413, false)
	if err := p.Push(ctx, 41012, nil); err != nil {
		t.Fatal(err)
	}
	checkQBittorrent(t, d, c, url, creds, 41012)
	if err := p.Push(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	checkQBittorrent(t, d, c, url, creds, 41012)

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
	checkQBittorrent(t, d, c, url, creds, 41012)

	// qBittorrent restarted: the pusher's session is gone, it logs in
	// again (once) and the push goes through.
	d.stop()
	d, _, _ = startQBittorrent(t, ns, dir, "", "", "")
	if err := p.Push(ctx, 41014, nil); err != nil {
		t.Fatalf("push after a restart: %v", err)
	}
	checkQBittorrent(t, d, c, url, creds, 41014)
}

// TestQBittorrentLocalHostBypass: qBittorrent set to let localhost in
// without a login ("Bypass authentication for clients on localhost"),
// the pusher without credentials.
func TestQBittorrentLocalHostBypass(t *testing.T) {
	ns := newNS(t)
	creds := Credentials{User: "alice", Password: testPassword}
	c := NamespaceHTTPClient(ns)
	d, url, _ := startQBittorrent(t, ns, "", creds.User, creds.Password, "WebUI\\LocalHostAuth=false\n")
	if err := NewQBittorrent(url, nil, c).Push(context.Background(), 41031, nil); err != nil {
		t.Fatal(err)
	}
	checkQBittorrent(t, d, c, url, creds, 41031)
}

// TestQBittorrentNotStarted: nothing listens yet, an error to retry.
func TestQBittorrentNotStarted(t *testing.T) {
	ns := newNS(t)
	err := NewQBittorrent("http://127.0.0.1:8080", &Credentials{User: "alice", Password: testPassword}, NamespaceHTTPClient(ns)).Push(context.Background(), 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("push to no qBittorrent: %v", err)
	}
	checkAppErr(t, err, "qbittorrent http://127.0.0.1:8080")
}
