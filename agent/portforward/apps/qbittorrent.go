package apps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// qbCSRFHint explains qBittorrent's 401: its CSRF protection (Referer or
// Origin of another host) or Host header validation refused the request.
const qbCSRFHint = "qBittorrent's CSRF or Host header check refused the request: is the URL the Web UI's own address?"

type qbittorrent struct {
	app // url: the Web UI's root, e.g. http://127.0.0.1:8080

	mu      sync.Mutex
	cookies []*http.Cookie // the session (SID) of the last login
}

// NewQBittorrent pushes to qBittorrent's Web API v2 at url (the Web UI's
// root, e.g. http://127.0.0.1:8080) with app/setPreferences: listen_port,
// and random_port and upnp (its own UPnP/NAT-PMP) off, so the port stays
// the provider's. creds, if not nil, log in first (auth/login) and again
// once when the session has expired (403); without them qBittorrent must
// bypass authentication for the agent (localhost or a whitelisted subnet).
func NewQBittorrent(url string, creds *Credentials, do Doer) Pusher {
	return &qbittorrent{app: app{name: "qbittorrent", url: strings.TrimRight(url, "/"), creds: creds, do: do}}
}

// qbPrefs is what setPreferences sets (its json= value); %d is the port.
const qbPrefs = `{"listen_port":%d,"random_port":false,"upnp":false}`

func (q *qbittorrent) Push(ctx context.Context, port uint16, _ []string) error {
	if port == 0 {
		return nil // nothing to set: qBittorrent keeps listening where it does
	}
	form := url.Values{"json": {fmt.Sprintf(qbPrefs, port)}}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.creds != nil && q.cookies == nil {
		if err := q.login(ctx); err != nil {
			return q.fail("login", err)
		}
	}
	r, err := q.post(ctx, "/api/v2/app/setPreferences", form)
	if err == nil && r.status == http.StatusForbidden && q.creds != nil {
		// The session expired (or qBittorrent restarted): log in again, once.
		q.cookies = nil
		if err := q.login(ctx); err != nil {
			return q.fail("login", err)
		}
		r, err = q.post(ctx, "/api/v2/app/setPreferences", form)
	}
	what := fmt.Sprintf("setPreferences listen_port %d", port)
	if err != nil {
		return q.fail(what, err)
	}
	switch r.status {
	case http.StatusOK:
		return nil
	case http.StatusForbidden:
		hint := "not logged in: give credentialsFile, or let qBittorrent bypass authentication for the agent"
		if q.creds != nil {
			hint = "refused after a fresh login"
		}
		return q.fail(what, r.statusErr(hint))
	case http.StatusUnauthorized:
		return q.fail(what, r.statusErr(qbCSRFHint))
	}
	return q.fail(what, r.statusErr(""))
}

// login opens a session as q.creds: qBittorrent answers "Ok." and a SID
// cookie, or "Fails." for a wrong username or password.
func (q *qbittorrent) login(ctx context.Context) error {
	form := url.Values{"username": {q.creds.User}, "password": {q.creds.Password}}
	r, err := q.post(ctx, "/api/v2/auth/login", form)
	if err != nil {
		return err
	}
	switch {
	case r.status == http.StatusOK && bytes.Equal(bytes.TrimSpace(r.body), []byte("Ok.")):
		q.cookies = r.cookie
		return nil
	case r.status == http.StatusOK && bytes.Equal(bytes.TrimSpace(r.body), []byte("Fails.")):
		return errors.New("wrong username or password for user " + q.creds.User)
	case r.status == http.StatusUnauthorized:
		return r.statusErr(qbCSRFHint)
	case r.status == http.StatusForbidden:
		return r.statusErr("qBittorrent bans an address after repeated failed logins")
	}
	return r.statusErr("")
}

// post sends a form to path under the Web UI's root with the session's
// cookies. Referer is the Web UI's own origin: qBittorrent's CSRF check
// refuses a Referer or Origin of another host.
func (q *qbittorrent) post(ctx context.Context, path string, form url.Values) (*reply, error) {
	req, err := newRequest(ctx, http.MethodPost, q.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", (&url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host}).String())
	for _, c := range q.cookies {
		req.AddCookie(c)
	}
	return send(q.do, req)
}
