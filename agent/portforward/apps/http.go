package apps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Doer sends an HTTP request: *http.Client, in production
// NamespaceHTTPClient.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Timeouts of NamespaceHTTPClient.
const (
	dialTimeout    = 5 * time.Second
	headerTimeout  = 10 * time.Second
	requestTimeout = 15 * time.Second
)

// newHTTPClient is NamespaceHTTPClient's client around dial: no proxy,
// no redirect followed, no idle connection, every request bounded.
func newHTTPClient(dial dialFunc) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            dial,
			TLSHandshakeTimeout:    dialTimeout,
			ResponseHeaderTimeout:  headerTimeout,
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       requestTimeout,
	}
}

// maxBody bounds what is read of an application's answer.
const maxBody = 1 << 20

// reply is an application's answer, read whole (up to maxBody).
type reply struct {
	status int
	header http.Header
	body   []byte
	cookie []*http.Cookie
}

// newRequest is http.NewRequestWithContext whose error does not echo
// the URL (which may hold a password).
func newRequest(ctx context.Context, method, rawURL string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	var ue *url.Error
	if errors.As(err, &ue) {
		return nil, fmt.Errorf("bad URL: %w", ue.Err)
	}
	return req, err
}

// send does req and reads the answer. A transport error comes without
// the URL (the caller's error names it) and keeps its cause for
// errors.Is.
func send(do Doer, req *http.Request) (*reply, error) {
	resp, err := do.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("HTTP %d: read answer: %w", resp.StatusCode, err)
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: body, cookie: resp.Cookies()}, nil
}

// statusErr says what an unexpected status was, with a short excerpt of
// the answer, and hint (if any) after it.
func (r *reply) statusErr(hint string) error {
	s := fmt.Sprintf("HTTP %d %s", r.status, http.StatusText(r.status))
	if e := excerpt(r.body); e != "" {
		s += ": " + e
	}
	if hint != "" {
		s += " (" + hint + ")"
	}
	return errors.New(s)
}

// excerptLen bounds the body excerpt in an error.
const excerptLen = 120

// excerpt is the start of body on one line: control characters and runs
// of white space become one space, at most excerptLen bytes.
func excerpt(body []byte) string {
	s := strings.Join(strings.FieldsFunc(string(body), func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if len(s) <= excerptLen {
		return s
	}
	cut := excerptLen
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }

// app is what a pusher over HTTP knows of its application.
type app struct {
	name  string // Pusher.Name
	url   string
	creds *Credentials // nil: no login
	do    Doer
}

func (a *app) Name() string   { return a.name }
func (a *app) String() string { return a.name + " " + redactURL(a.url) }

// fail is the application's error for what went wrong.
// Its name and URL (without any userinfo) come first.
func (a *app) fail(what string, err error) error {
	return fmt.Errorf("%s %s: %s: %w", a.name, redactURL(a.url), what, err)
}

// redactURL drops userinfo from a URL, so an error never shows a
// password written into it.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}
