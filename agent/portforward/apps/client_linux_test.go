package apps

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// serve answers every request with body on l until the test ends.
func serve(t *testing.T, l net.Listener, body string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// TestNamespaceHTTPClient: 127.0.0.1 is the namespace's loopback. The
// host's loopback listens on the same port with another answer, so a
// connection made from the host namespace would be seen.
func TestNamespaceHTTPClient(t *testing.T) {
	ns := newNS(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, host, "host")
	port := strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
	var inNS net.Listener
	if err := netns.Do(ns, func() (err error) { inNS, err = net.Listen("tcp", "127.0.0.1:"+port); return err }); err != nil {
		t.Fatal(err)
	}
	serve(t, inNS, "namespace")

	get := func(c *http.Client, url string) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// Positive control: the host's client sees the host's server.
	if got, err := get(http.DefaultClient, "http://127.0.0.1:"+port); err != nil || got != "host" {
		t.Fatalf("host client: %q %v", got, err)
	}
	c := NamespaceHTTPClient(ns, nil)
	for _, h := range []string{"127.0.0.1", "localhost"} {
		if got, err := get(c, "http://"+h+":"+port+"/"); err != nil || got != "namespace" {
			t.Fatalf("namespace client to %s: %q %v, want the namespace's server", h, got, err)
		}
	}
	// Names are not resolved (the lookup would leave from the host).
	_, err = get(c, "http://app.example:"+port+"/")
	if err == nil || !strings.Contains(err.Error(), "want an IP address or localhost") {
		t.Fatalf("a host name: %v", err)
	}
	// A namespace that is not there: an error, no connection elsewhere.
	if _, err := get(NamespaceHTTPClient("pfnotup", nil), "http://127.0.0.1:"+port); err == nil || !strings.Contains(err.Error(), `open netns "pfnotup"`) {
		t.Fatalf("client of no namespace: %v", err)
	}
	// The caller's context bounds a request.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port, nil)
	if _, err := c.Do(req); err == nil {
		t.Fatal("a request with a cancelled context succeeded")
	}
}
