package apps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// sessionIDHeader is Transmission's CSRF token: a request without the
// current one is answered 409 with it.
const sessionIDHeader = "X-Transmission-Session-Id"

type transmission struct {
	app

	mu  sync.Mutex
	sid string // the last session id Transmission gave
}

// NewTransmission pushes to Transmission's RPC at url (e.g.
// http://127.0.0.1:9091/transmission/rpc) with session-set: peer-port,
// and peer-port-random-on-start and port-forwarding-enabled (its own
// NAT-PMP/UPnP) off, so the port stays the provider's. creds, if not nil,
// log in with HTTP basic auth.
func NewTransmission(url string, creds *Credentials, do Doer) Pusher {
	return &transmission{app: app{name: "transmission", url: url, creds: creds, do: do}}
}

// trSessionSet is the session-set request; %d is the port.
const trSessionSet = `{"arguments":{"peer-port":%d,"peer-port-random-on-start":false,"port-forwarding-enabled":false},"method":"session-set"}`

func (t *transmission) Push(ctx context.Context, port uint16, _ []string) error {
	if port == 0 {
		return nil // nothing to set: Transmission keeps listening where it does
	}
	if err := t.rpc(ctx, fmt.Appendf(nil, trSessionSet, port)); err != nil {
		return t.fail(fmt.Sprintf("session-set peer-port %d", port), err)
	}
	return nil
}

// rpc posts one RPC request, doing the session id dance once, and checks
// its result.
func (t *transmission) rpc(ctx context.Context, body []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r *reply
	for try := 0; ; try++ {
		req, err := newRequest(ctx, http.MethodPost, t.url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if t.sid != "" {
			req.Header.Set(sessionIDHeader, t.sid)
		}
		if t.creds != nil {
			req.SetBasicAuth(t.creds.User, t.creds.Password)
		}
		if r, err = send(t.do, req); err != nil {
			return err
		}
		if r.status != http.StatusConflict {
			break
		}
		sid := r.header.Get(sessionIDHeader)
		if sid == "" {
			return r.statusErr("no " + sessionIDHeader + " header: is this Transmission's RPC URL?")
		}
		t.sid = sid
		if try == 1 {
			return r.statusErr("the new session id was refused too")
		}
	}
	switch r.status {
	case http.StatusOK:
	case http.StatusUnauthorized:
		if t.creds == nil {
			return r.statusErr("Transmission wants a login: give credentialsFile")
		}
		return r.statusErr("wrong username or password for user " + t.creds.User)
	case http.StatusForbidden:
		return r.statusErr("Transmission's rpc-whitelist refuses the agent")
	default:
		return r.statusErr("")
	}
	var res struct {
		Result string `json:"result"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return fmt.Errorf("answer is not RPC JSON: %s", excerpt(r.body))
	}
	if res.Result != "success" {
		return errors.New("result: " + excerpt([]byte(res.Result)))
	}
	return nil
}
