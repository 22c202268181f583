package apps

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeTransmission answers like Transmission's RPC: 409 with a session
// id until a request carries it, basic auth when user is set.
type fakeTransmission struct {
	mu       sync.Mutex
	sid      string
	user, pw string
	result   string // "" means success
	requests int
	bodies   []map[string]any
	ignoreID bool // answer 409 whatever the id
}

func (f *fakeTransmission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != f.user || p != f.pw {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "<h1>401: Unauthorized</h1><p>Unauthorized User</p>")
			return
		}
	}
	if f.ignoreID || r.Header.Get(sessionIDHeader) != f.sid {
		w.Header().Set(sessionIDHeader, f.sid)
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, "<h1>409: Conflict</h1>")
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.bodies = append(f.bodies, req)
	res := f.result
	if res == "" {
		res = "success"
	}
	json.NewEncoder(w).Encode(map[string]any{"result": res, "arguments": map[string]any{}})
}

func newFakeTransmission(t *testing.T, f *fakeTransmission) string {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL + "/transmission/rpc"
}

func TestTransmissionSessionIDDance(t *testing.T) {
	f := &fakeTransmission{sid: "first-id"}
	url := newFakeTransmission(t, f)
	p := NewTransmission(url, nil, http.DefaultClient)
	if p.Name() != "transmission" {
		t.Fatalf("name %q", p.Name())
	}
	ctx := context.Background()
	if err := p.Push(ctx, 41001, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	if f.requests != 2 {
		t.Fatalf("%d requests for the first push, want 2 (409, then with the id)", f.requests)
	}
	want := map[string]any{"method": "session-set", "arguments": map[string]any{"peer-port": 41001.0, "peer-port-random-on-start": false, "port-forwarding-enabled": false}}
	if got, _ := json.Marshal(f.bodies[0]); string(got) != string(must(json.Marshal(want))) {
		t.Fatalf("request %s, want %s", got, must(json.Marshal(want)))
	}
	// The id is remembered: one request per push.
	if err := p.Push(ctx, 41002, nil); err != nil || f.requests != 3 {
		t.Fatalf("second push: %v, %d requests in all (want 3)", err, f.requests)
	}
	// Transmission restarted: a new id, learnt again.
	f.sid = "second-id"
	if err := p.Push(ctx, 41003, nil); err != nil || f.requests != 5 {
		t.Fatalf("push after a new id: %v, %d requests in all (want 5)", err, f.requests)
	}
	// Port 0: nothing to set.
	if err := p.Push(ctx, 0, nil); err != nil || f.requests != 5 {
		t.Fatalf("port 0: %v, %d requests in all (want none more)", err, f.requests)
	}
}

func TestTransmissionErrors(t *testing.T) {
	ctx := context.Background()
	f := &fakeTransmission{sid: "x", ignoreID: true}
	url := newFakeTransmission(t, f)
	err := NewTransmission(url, nil, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || f.requests != 2 || !strings.Contains(err.Error(), "HTTP 409") {
		t.Fatalf("409 every time: %v after %d requests, want an error after 2", err, f.requests)
	}
	checkAppErr(t, err, "transmission "+url)

	f = &fakeTransmission{sid: "x", result: "peer-port out of range"}
	url = newFakeTransmission(t, f)
	err = NewTransmission(url, nil, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "result: peer-port out of range") {
		t.Fatalf("failed result: %v", err)
	}
	checkAppErr(t, err, "transmission "+url)

	f = &fakeTransmission{sid: "x", user: "alice", pw: "other"}
	url = newFakeTransmission(t, f)
	err = NewTransmission(url, &Credentials{User: "alice", Password: testPassword}, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "wrong username or password") {
		t.Fatalf("wrong password: %v", err)
	}
	checkAppErr(t, err, "transmission "+url)
	f.pw = testPassword
	if err := NewTransmission(url, &Credentials{User: "alice", Password: testPassword}, http.DefaultClient).Push(ctx, 41001, nil); err != nil {
		t.Fatalf("right password: %v", err)
	}

	// A URL with a password in it is never shown.
	err = NewTransmission("http://alice:"+testPassword+"@127.0.0.1:1/rpc", nil, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil {
		t.Fatal("push to a closed port succeeded")
	}
	checkAppErr(t, err, "transmission http://127.0.0.1:1/rpc")
	err = NewTransmission("http://alice:"+testPassword+"@127.0.0.1:x/rpc", nil, http.DefaultClient).Push(ctx, 41001, nil)
	if err == nil {
		t.Fatal("push to a bad URL succeeded")
	}
	checkOneLineNoSecret(t, err)
}

// checkAppErr: one line, no password, starting with prefix (the app and
// its URL).
func checkAppErr(t *testing.T, err error, prefix string) {
	t.Helper()
	t.Logf("error: %v", err)
	checkOneLineNoSecret(t, err)
	if !strings.HasPrefix(err.Error(), prefix+": ") {
		t.Errorf("error %q does not start with %q", err, prefix)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
