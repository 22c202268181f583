package apps

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeQBittorrent answers like qBittorrent's Web API v2: login with a SID
// cookie, 403 without a session, 401 for a foreign Referer.
type fakeQBittorrent struct {
	mu       sync.Mutex
	user, pw string // "" means authentication bypassed
	sids     map[string]bool
	n        int
	logins   int
	sets     []string // json= of each setPreferences accepted
	referers []string
	forbid   bool // every session refused
}

func (f *fakeQBittorrent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.referers = append(f.referers, r.Header.Get("Referer"))
	if ref := r.Header.Get("Referer"); ref != "" && !strings.HasPrefix(ref, "http://"+r.Host) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/api/v2/auth/login":
		f.logins++
		if r.FormValue("username") != f.user || r.FormValue("password") != f.pw {
			io.WriteString(w, "Fails.")
			return
		}
		f.n++
		sid := "sid" + strings.Repeat("x", f.n)
		f.sids[sid] = true
		http.SetCookie(w, &http.Cookie{Name: "SID", Value: sid, HttpOnly: true, Path: "/"})
		io.WriteString(w, "Ok.")
	case "/api/v2/app/setPreferences":
		if c, err := r.Cookie("SID"); f.forbid || f.user != "" && (err != nil || !f.sids[c.Value]) {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "Forbidden")
			return
		}
		f.sets = append(f.sets, r.FormValue("json"))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func newFakeQBittorrent(t *testing.T, f *fakeQBittorrent) string {
	f.sids = map[string]bool{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestQBittorrentLogin(t *testing.T) {
	ctx := context.Background()
	f := &fakeQBittorrent{user: "alice", pw: testPassword}
	url := newFakeQBittorrent(t, f)
	p := NewQBittorrent(url+"/", &Credentials{User: "alice", Password: testPassword}, http.DefaultClient)
	if p.Name() != "qbittorrent" {
		t.Fatalf("name %q", p.Name())
	}
	if err := p.Push(ctx, 41001, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	if want := `{"listen_port":41001,"random_port":false,"upnp":false}`; len(f.sets) != 1 || f.sets[0] != want || f.logins != 1 {
		t.Fatalf("after one push: %d logins, preferences %q, want 1 and %s", f.logins, f.sets, want)
	}
	for _, ref := range f.referers {
		if ref != url {
			t.Fatalf("Referer %q, want the Web UI's origin %s", ref, url)
		}
	}
	// The session is kept: no second login.
	if err := p.Push(ctx, 41002, nil); err != nil || f.logins != 1 || len(f.sets) != 2 {
		t.Fatalf("second push: %v, %d logins, %d sets", err, f.logins, len(f.sets))
	}
	// The session expired: one login more.
	f.sids = map[string]bool{}
	if err := p.Push(ctx, 41003, nil); err != nil || f.logins != 2 || len(f.sets) != 3 {
		t.Fatalf("push after the session expired: %v, %d logins, %d sets", err, f.logins, len(f.sets))
	}
	if err := p.Push(ctx, 0, nil); err != nil || f.logins != 2 || len(f.sets) != 3 {
		t.Fatalf("port 0: %v, %d logins, %d sets, want nothing sent", err, f.logins, len(f.sets))
	}
}

func TestQBittorrentErrors(t *testing.T) {
	ctx := context.Background()
	f := &fakeQBittorrent{user: "alice", pw: "other"}
	url := newFakeQBittorrent(t, f)
	err := NewQBittorrent(url, &Credentials{User: "alice", Password: testPassword}, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "login: wrong username or password for user alice") || len(f.sets) != 0 {
		t.Fatalf("wrong password: %v", err)
	}
	checkAppErr(t, err, "qbittorrent "+url)

	// No credentials for a qBittorrent that wants them.
	err = NewQBittorrent(url, nil, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "credentialsFile") {
		t.Fatalf("no credentials: %v", err)
	}
	checkAppErr(t, err, "qbittorrent "+url)

	// Refused even after a fresh login: one login more, not a loop.
	f = &fakeQBittorrent{user: "alice", pw: testPassword, forbid: true}
	url = newFakeQBittorrent(t, f)
	err = NewQBittorrent(url, &Credentials{User: "alice", Password: testPassword}, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || f.logins != 2 || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "after a fresh login") {
		t.Fatalf("403 after login: %v after %d logins, want an error after 2", err, f.logins)
	}
	checkAppErr(t, err, "qbittorrent "+url)

	// Authentication bypassed: no login at all.
	f = &fakeQBittorrent{}
	url = newFakeQBittorrent(t, f)
	if err := NewQBittorrent(url, nil, http.DefaultClient).Push(ctx, 41001, nil); err != nil || f.logins != 0 || len(f.sets) != 1 {
		t.Fatalf("bypassed authentication: %v, %d logins, %d sets", err, f.logins, len(f.sets))
	}
}
