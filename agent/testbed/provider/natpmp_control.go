package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// NATPMPControl is a gateway's runtime controls: the *Gateway of an
// in-process provider (Provider.NATPMP), or DialNATPMP's for a provider
// process (NATPMP.Control).
type NATPMPControl interface {
	ChangePort() error
	Down() error
	Up() error
	Restart() error
	Mappings() ([]Mapping, error)
}

var _ NATPMPControl = (*Gateway)(nil)

// listenControl serves g's controls over HTTP on a unix socket at path
// (POST /changeport, /down, /up, /restart; GET /mappings).
func listenControl(path string, g *Gateway) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("natpmp control: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("natpmp control: %w", err)
	}
	mux := http.NewServeMux()
	for name, fn := range map[string]func() error{"changeport": g.ChangePort, "down": g.Down, "up": g.Up, "restart": g.Restart} {
		mux.HandleFunc("POST /"+name, func(w http.ResponseWriter, _ *http.Request) {
			if err := fn(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})
	}
	mux.HandleFunc("GET /mappings", func(w http.ResponseWriter, _ *http.Request) {
		ms, _ := g.Mappings()
		json.NewEncoder(w).Encode(ms)
	})
	go (&http.Server{Handler: mux}).Serve(l)
	return l, nil
}

// DialNATPMP returns the controls of the gateway serving path.
func DialNATPMP(path string) NATPMPControl {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return remoteGateway{&http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

type remoteGateway struct{ c *http.Client }

func (r remoteGateway) ChangePort() error { return r.do("POST", "changeport", nil) }
func (r remoteGateway) Down() error       { return r.do("POST", "down", nil) }
func (r remoteGateway) Up() error         { return r.do("POST", "up", nil) }
func (r remoteGateway) Restart() error    { return r.do("POST", "restart", nil) }

func (r remoteGateway) Mappings() ([]Mapping, error) {
	var ms []Mapping
	return ms, r.do("GET", "mappings", &ms)
}

func (r remoteGateway) do(method, name string, out any) error {
	req, err := http.NewRequest(method, "http://natpmp/"+name, nil)
	if err != nil {
		return fmt.Errorf("natpmp control %s: %w", name, err)
	}
	resp, err := r.c.Do(req)
	if err != nil {
		return fmt.Errorf("natpmp control %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("natpmp control %s: %s: %s", name, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("natpmp control %s: %w", name, err)
		}
	}
	return nil
}
