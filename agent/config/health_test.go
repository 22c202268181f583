package config

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	f := newFixture(t)
	second := f.secondServer(t, "10.3.0.1", "nl.vpn.example:51820")
	s, err := resolveJSON(t, map[string]any{"name": "proton", "wireguard": map[string]any{"configFiles": []any{f.wgFile, second}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pool) != 2 || s.Pool[0] != s || s.Server != 0 || s.Pool[1].Server != 1 || s.Pool[1].Pool[0] != s {
		t.Fatalf("pool not linked: %+v", s.Pool)
	}
	if a, d := s.Pool[1].Addresses[0].String(), s.Pool[1].DNS[0].String(); a != "10.3.0.7/32" || d != "10.3.0.1" {
		t.Errorf("second server: address %s, DNS %s", a, d)
	}
	if s.Addresses[0].String() != "10.2.0.2/32" || s.Pool[1].Peers[0].Endpoint != "nl.vpn.example:51820" {
		t.Errorf("first server: %v, second's endpoint %s", s.Addresses, s.Pool[1].Peers[0].Endpoint)
	}
	// A bad server is named by its index in the pool, with its line.
	f.secondServer(t, "127.0.0.1", "192.0.2.9:51820")
	_, err = resolveJSON(t, map[string]any{"name": "proton", "wireguard": map[string]any{"configFiles": []any{f.wgFile, second}}})
	wantErr(t, err, "wireguard.configFiles[1]", second+" line 4: DNS: 127.0.0.1")
	for _, tc := range []struct {
		wg    map[string]any
		field string
		want  string
	}{
		{map[string]any{"configFile": f.wgFile, "configFiles": []any{second}}, "wireguard.configFiles", "not both"},
		{map[string]any{"configFiles": []any{f.wgFile}, "privateKeyFile": f.keyFile}, "wireguard.configFiles", "whole server"},
		{map[string]any{"configFiles": []any{f.wgFile, f.wgFile}}, "wireguard.configFiles[1]", "also configFiles[0]"},
	} {
		_, err := resolveJSON(t, map[string]any{"name": "proton", "wireguard": tc.wg})
		wantErr(t, err, tc.field, tc.want)
	}
}

func TestProbeAndMetrics(t *testing.T) {
	f := newFixture(t)
	m := f.structured()
	m["health"] = map[string]any{"probe": map[string]any{"address": "10.2.0.1:53", "interval": "10s"}}
	m["metrics"] = map[string]any{"listen": "127.0.0.1:9586"}
	s, err := resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if s.Probe.Target != netip.MustParseAddrPort("10.2.0.1:53") || s.Probe.Interval != 10*time.Second || s.Probe.Failures != DefaultProbeFailures {
		t.Errorf("probe %+v", s.Probe)
	}
	if s.Metrics.Network != "tcp" || s.Metrics.String() != "127.0.0.1:9586" {
		t.Errorf("metrics %+v", s.Metrics)
	}
	m["health"] = map[string]any{"probe": map[string]any{"address": "10.2.0.1"}}
	m["metrics"] = map[string]any{"listen": "unix:/run/vpn-confinement/proton.metrics.sock"}
	if s, err = resolveJSON(t, m); err != nil || s.Probe.Target.Port() != 0 || s.Probe.Interval != DefaultProbeInterval || s.Metrics.Network != "unix" {
		t.Fatalf("ICMP probe / unix listener: %+v %+v %v", s.Probe, s.Metrics, err)
	}
	for _, tc := range []struct {
		health, metrics any
		field, want     string
	}{
		{map[string]any{"probe": map[string]any{"address": "resolver.example:53"}}, nil, "health.probe.address", "is neither"},
		{map[string]any{"probe": map[string]any{"address": "127.0.0.1:53"}}, nil, "health.probe.address", "not reached through the tunnel"},
		{map[string]any{"probe": map[string]any{"address": "[fd00::1]:53"}}, nil, "health.probe.address", "IPv6 is blocked"},
		{map[string]any{"probe": map[string]any{"address": "10.2.0.1:53", "interval": "100ms"}}, nil, "health.probe.interval", "out of range"},
		{map[string]any{"probe": map[string]any{"address": "10.2.0.1:53", "interval": "often"}}, nil, "health.probe.interval", "not a duration"},
		{map[string]any{"probe": map[string]any{"address": "10.2.0.1:53", "failures": 1000}}, nil, "health.probe.failures", "out of range"},
		{nil, map[string]any{"listen": "localhost"}, "metrics.listen", "is not"},
		{nil, map[string]any{"listen": "unix:relative.sock"}, "metrics.listen", "absolute"},
		{nil, map[string]any{"listen": ":9586"}, "metrics.listen", "is not"}, // no host: never every address by omission
	} {
		m := f.structured()
		if tc.health != nil {
			m["health"] = tc.health
		}
		if tc.metrics != nil {
			m["metrics"] = tc.metrics
		}
		_, err := resolveJSON(t, m)
		wantErr(t, err, tc.field, tc.want)
	}
}

// Issue 21.3: without health.probe, each server of a pool is probed at
// its own first resolver, with a DNS query; "probe": null turns it off
// (and a config written back as JSON keeps it off); an explicit address
// is kept as written; a server without a resolver gets no default.
func TestDefaultProbe(t *testing.T) {
	f := newFixture(t)
	second := f.secondServer(t, "10.3.0.1, 10.3.0.2", "nl.vpn.example:51820")
	pool := map[string]any{"configFiles": []any{f.wgFile, second}}
	s, err := resolveJSON(t, map[string]any{"name": "proton", "wireguard": pool})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"10.2.0.1:53", "10.3.0.1:53"} {
		p := s.Pool[i].Probe
		if p == nil || !p.DNS || p.Target != netip.MustParseAddrPort(want) || p.Interval != DefaultProbeInterval || p.Failures != DefaultProbeFailures {
			t.Errorf("server %d: default probe %+v, want a DNS query to %s every %v", i, p, want, DefaultProbeInterval)
		}
	}
	// dns.servers overrides the files' resolvers, and so the default.
	m := f.structured()
	m["dns"] = map[string]any{"servers": []any{"10.9.0.1", "10.9.0.2"}}
	if s, err = resolveJSON(t, m); err != nil || s.Probe == nil || s.Probe.Target != netip.MustParseAddrPort("10.9.0.1:53") {
		t.Errorf("with dns.servers: probe %+v, %v", s.Probe, err)
	}

	off := []byte(`{"name": "proton", "wireguard": {"configFiles": ["` + f.wgFile + `", "` + second + `"]}, "health": {"probe": null}}`)
	c, err := Parse(off)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Health.NoProbe {
		t.Fatal(`"probe": null was not recorded`)
	}
	if s, err = Resolve(c, Options{}); err != nil || s.Pool[0].Probe != nil || s.Pool[1].Probe != nil {
		t.Fatalf(`"probe": null: probes %+v %+v, %v; want none`, s.Pool[0].Probe, s.Pool[1].Probe, err)
	}
	b, err := json.Marshal(c)
	if err != nil || !strings.Contains(string(b), `"health":{"probe":null}`) {
		t.Fatalf("written back: %s, %v", b, err)
	}
	if c2, err := Parse(b); err != nil || !c2.Health.NoProbe {
		t.Fatalf("read back: %+v, %v", c2, err)
	}
	// Positive control: "health": {} is the default, not off.
	if c, err := Parse([]byte(`{"name": "proton", "health": {}}`)); err != nil || c.Health.NoProbe {
		t.Fatalf(`"health": {}: %+v, %v`, c, err)
	}

	m = map[string]any{"name": "proton", "wireguard": pool, "health": map[string]any{"probe": map[string]any{"address": "10.8.0.1:443"}}}
	if s, err = resolveJSON(t, m); err != nil || s.Pool[1].Probe == nil || s.Pool[1].Probe.DNS || s.Pool[1].Probe.Target != netip.MustParseAddrPort("10.8.0.1:443") {
		t.Fatalf("explicit address: %+v, %v", s.Pool[1].Probe, err)
	}

	// Tuning without an address tunes the default.
	m = map[string]any{"name": "proton", "wireguard": pool, "health": map[string]any{"probe": map[string]any{"interval": "10s", "failures": 2}}}
	if s, err = resolveJSON(t, m); err != nil || s.Pool[1].Probe == nil || !s.Pool[1].Probe.DNS || s.Pool[1].Probe.Target != netip.MustParseAddrPort("10.3.0.1:53") ||
		s.Pool[1].Probe.Interval != 10*time.Second || s.Pool[1].Probe.Failures != 2 {
		t.Fatalf("interval and failures alone: %+v, %v", s.Pool[1].Probe, err)
	}

	bare := f.secondServer(t, "", "nl.vpn.example:51820")
	m = map[string]any{"name": "proton", "wireguard": map[string]any{"configFile": bare}, "dns": map[string]any{"mode": "tunnel"}}
	s, err = resolveJSON(t, m)
	if err != nil || s.Probe != nil {
		t.Fatalf("a server without DNS: probe %+v, %v; want none", s.Probe, err)
	}
	m["health"] = map[string]any{"probe": map[string]any{"interval": "10s"}}
	_, err = resolveJSON(t, m)
	wantErr(t, err, "health.probe.address", "no resolver to probe by default")
}

// Issue 20: metrics.listen on every address of the host is accepted with
// a warning (the endpoints have no authentication); a loopback, a single
// host address or a unix socket is not warned about.
func TestMetricsExposed(t *testing.T) {
	for addr, warn := range map[string]bool{
		"0.0.0.0:9586": true, "[::]:9586": true, "[::ffff:0.0.0.0]:9586": true,
		"127.0.0.1:9586": false, "[::1]:9586": false, "192.168.1.5:9586": false,
	} {
		w := (&Listen{Network: "tcp", Address: addr}).Exposed()
		if (w != "") != warn || warn && !strings.Contains(w, "without authentication") {
			t.Errorf("%s: warning %q, want one: %v", addr, w, warn)
		}
	}
	if w := (&Listen{Network: "unix", Address: "/run/vpn-confinement/x.sock"}).Exposed(); w != "" {
		t.Errorf("unix socket: %q", w)
	}
	if w := (*Listen)(nil).Exposed(); w != "" {
		t.Errorf("metrics off: %q", w)
	}
}

// health.fast (issue 25): the probe every 1 s, 2 failures; refused with
// the probe off or with its own interval or failures. preferFirst
// defaults to on.
func TestHealthFastAndPreferFirst(t *testing.T) {
	f := newFixture(t)
	m := f.structured()
	m["health"] = map[string]any{"fast": true}
	s, err := resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if s.Probe == nil || s.Probe.Interval != time.Second || s.Probe.Failures != 2 || !s.Probe.DNS || !s.PreferFirst {
		t.Fatalf("fast: probe %+v, preferFirst %v", s.Probe, s.PreferFirst)
	}
	m["health"] = map[string]any{"fast": true, "probe": map[string]any{"address": "10.2.0.1:443"}}
	if s, err = resolveJSON(t, m); err != nil || s.Probe.Interval != time.Second || s.Probe.Target.Port() != 443 {
		t.Fatalf("fast with an address: %+v %v", s.Probe, err)
	}
	m["health"] = map[string]any{"preferFirst": false}
	if s, err = resolveJSON(t, m); err != nil || s.PreferFirst || s.Probe.Interval != DefaultProbeInterval || !s.Standby {
		t.Fatalf("preferFirst false: %v %+v %v (standby %v)", s.PreferFirst, s.Probe, err, s.Standby)
	}
	// health.standby: on by default (above), off when false, on when true.
	m["health"] = map[string]any{"standby": false}
	if s, err = resolveJSON(t, m); err != nil || s.Standby || !s.PreferFirst || s.Probe.Interval != DefaultProbeInterval {
		t.Fatalf("standby false: %v %v %+v %v", s.Standby, s.PreferFirst, s.Probe, err)
	}
	m["health"] = map[string]any{"standby": true, "fast": true}
	if s, err = resolveJSON(t, m); err != nil || !s.Standby || s.Probe.Interval != time.Second {
		t.Fatalf("standby true with fast: %v %+v %v", s.Standby, s.Probe, err)
	}
	m["health"] = map[string]any{"standby": "no"}
	if _, err = resolveJSON(t, m); err == nil || !strings.Contains(err.Error(), "standby") {
		t.Fatalf("standby \"no\": %v, want an error naming the field", err)
	}
	for _, tc := range []struct {
		health map[string]any
		want   string
	}{
		{map[string]any{"fast": true, "probe": nil}, "probe is off"},
		{map[string]any{"fast": true, "probe": map[string]any{"address": "10.2.0.1:53", "interval": "5s"}}, "sets the interval"},
		{map[string]any{"fast": true, "probe": map[string]any{"address": "10.2.0.1:53", "failures": 3}}, "sets the failures"},
	} {
		m["health"] = tc.health
		_, err := resolveJSON(t, m)
		wantErr(t, err, "health.fast", tc.want)
	}
}
