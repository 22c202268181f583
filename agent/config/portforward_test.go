package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPortForwarding(t *testing.T) {
	f := newFixture(t)
	creds := filepath.Join(f.dir, "qbt")
	write(t, creds, "admin:s3cr:et\n", 0o600)
	m := f.structured()
	m["portForwarding"] = map[string]any{
		"natpmp":       map[string]any{},
		"transmission": map[string]any{"url": "http://127.0.0.1:9091/transmission/rpc", "user": "4242"},
		"qbittorrent":  map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": creds, "user": "nobody"},
		"onChange":     []any{"/usr/local/bin/port-changed", "--quiet"},
	}
	s, err := resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	p := s.PortForward
	// The default gateway is the server's resolver; proton style, both
	// protocols, a 60 s lease.
	if p.Gateway != netip.MustParseAddr("10.2.0.1") || p.Style != PortForwardProton || p.InternalPort != 0 ||
		!slices.Equal(p.Protocols, []string{"tcp", "udp"}) || p.Lifetime != time.Minute {
		t.Errorf("defaults: %+v", p)
	}
	if p.Transmission.User != "" || p.QBittorrent.User != "admin" || p.QBittorrent.Password != "s3cr:et" {
		t.Errorf("credentials: transmission %q, qbittorrent %q", p.Transmission.User, p.QBittorrent.User)
	}
	// The user the application runs as: a uid as it is, a name looked up.
	if p.Transmission.RunsAs != "4242" || p.Transmission.UID != 4242 || p.QBittorrent.RunsAs != "nobody" || p.QBittorrent.UID != 65534 {
		t.Errorf("users: transmission %q %d, qbittorrent %q %d", p.Transmission.RunsAs, p.Transmission.UID, p.QBittorrent.RunsAs, p.QBittorrent.UID)
	}
	if s := p.QBittorrent.String(); strings.Contains(s, "s3cr") {
		t.Errorf("String() shows the password: %s", s)
	}
	if len(p.OnChange) != 2 {
		t.Errorf("onChange %v", p.OnChange)
	}

	m["portForwarding"] = map[string]any{"natpmp": map[string]any{"gateway": "10.9.0.1", "style": "rfc", "internalPort": 51413, "protocol": "tcp", "lifetime": "2m"}}
	s, err = resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.PortForward; p.Gateway.String() != "10.9.0.1" || p.InternalPort != 51413 || !slices.Equal(p.Protocols, []string{"tcp"}) || p.Lifetime != 2*time.Minute {
		t.Errorf("rfc: %+v", p)
	}

	badCreds := filepath.Join(f.dir, "bad")
	write(t, badCreds, "no colon here\n", 0o600)
	open := filepath.Join(f.dir, "open")
	write(t, open, "a:b\n", 0o644)
	for _, tc := range []struct {
		pf    map[string]any
		field string
		want  string
	}{
		{map[string]any{}, "portForwarding.natpmp", "missing"},
		{map[string]any{"natpmp": map[string]any{"gateway": "fd00::1"}}, "portForwarding.natpmp.gateway", "not an IPv4"},
		{map[string]any{"natpmp": map[string]any{"gateway": "127.0.0.1"}}, "portForwarding.natpmp.gateway", "not reached through the tunnel"},
		{map[string]any{"natpmp": map[string]any{"style": "upnp"}}, "portForwarding.natpmp.style", `unknown style "upnp"`},
		{map[string]any{"natpmp": map[string]any{"style": "rfc"}}, "portForwarding.natpmp.internalPort", "required"},
		{map[string]any{"natpmp": map[string]any{"internalPort": 6881}}, "portForwarding.natpmp.internalPort", `"rfc"`},
		{map[string]any{"natpmp": map[string]any{"protocol": "sctp"}}, "portForwarding.natpmp.protocol", "sctp"},
		{map[string]any{"natpmp": map[string]any{"lifetime": "5s"}}, "portForwarding.natpmp.lifetime", "out of range"},
		{map[string]any{"natpmp": map[string]any{"lifetime": "90.5s"}}, "portForwarding.natpmp.lifetime", "whole seconds"},
		{map[string]any{"natpmp": map[string]any{}, "transmission": map[string]any{"url": "127.0.0.1:9091"}}, "portForwarding.transmission.url", "http(s) URL"},
		{map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://admin:hunter2@127.0.0.1:8080"}}, "portForwarding.qbittorrent.url", "credentialsFile"},
		{map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": creds}}, "portForwarding.qbittorrent.user", "required with credentialsFile"},
		{map[string]any{"natpmp": map[string]any{}, "transmission": map[string]any{"url": "http://127.0.0.1:9091/transmission/rpc", "user": "no-such-user-pf"}}, "portForwarding.transmission.user", `no user "no-such-user-pf"`},
		{map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": badCreds, "user": "0"}}, "portForwarding.qbittorrent.credentialsFile", `"username:password"`},
		{map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": open, "user": "0"}}, "portForwarding.qbittorrent.credentialsFile", "readable"},
		{map[string]any{"natpmp": map[string]any{}, "onChange": []any{"port-changed"}}, "portForwarding.onChange[0]", "absolute"},
	} {
		m["portForwarding"] = tc.pf
		_, err := resolveJSON(t, m)
		wantErr(t, err, tc.field, tc.want)
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows a password: %v", err)
		}
	}

	// A credentials file is one line "username:password"; what is wrong
	// with it is said without echoing it.
	for _, tc := range []struct{ content, user, pass, msg string }{
		{"alice:pa:55\n", "alice", "pa:55", ""},
		{"alice:pa55\r\n", "alice", "pa55", ""},
		{"bob:", "bob", "", ""},
		{"", "", "", "empty"},
		{"alice-pa55", "", "", "no colon"},
		{":pa55", "", "", "empty username"},
		{"alice:pa55\nmore", "", "", "more than one line"},
	} {
		write(t, creds, tc.content, 0o600)
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "transmission": map[string]any{"url": "http://127.0.0.1:9091/transmission/rpc", "credentialsFile": creds, "user": "0"}}
		s, err := resolveJSON(t, m)
		if tc.msg != "" {
			wantErr(t, err, "portForwarding.transmission.credentialsFile", tc.msg)
			if strings.Contains(err.Error(), "pa55") {
				t.Errorf("%q: the error shows the password: %v", tc.content, err)
			}
			continue
		}
		if err != nil || s.PortForward.Transmission.User != tc.user || s.PortForward.Transmission.Password != tc.pass {
			t.Errorf("%q: %v", tc.content, err)
		}
	}

	// No IPv4 resolver, no gateway: nothing to default to.
	m["dns"] = map[string]any{"mode": "tunnel"}
	m["portForwarding"] = map[string]any{"natpmp": map[string]any{}}
	_, err = resolveJSON(t, m)
	wantErr(t, err, "portForwarding.natpmp.gateway", "no default")
}
