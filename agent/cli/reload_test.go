package cli

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// jsonFields lists the leaf fields of the config document by their path
// ("wireguard.peers[].endpoint"), from config.Config's json tags.
func jsonFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			prefix += "[]"
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		out = append(out, jsonFields(f.Type, p)...)
	}
	return out
}

// reloadFixture writes what a config names: keys, a preshared key, a
// credentials file and two wg-quick files.
type reloadFixture struct {
	dir                         string
	key, key2, psk, creds       string
	peer, peer2                 wgtypes.Key
	server, serverCopy, server2 string
}

func newReloadFixture(t *testing.T) *reloadFixture {
	f := &reloadFixture{dir: t.TempDir()}
	w := func(name, s string) string {
		p := filepath.Join(f.dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gen := func() wgtypes.Key {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k, k2, psk := gen(), gen(), gen()
	f.peer, f.peer2 = gen().PublicKey(), gen().PublicKey()
	f.key, f.key2, f.psk = w("key", k.String()+"\n"), w("key2", k2.String()+"\n"), w("psk", psk.String()+"\n")
	f.creds = w("creds", "admin:secret\n")
	conf := func(k wgtypes.Key, addr, dns, peer, ep string) string {
		return "[Interface]\nPrivateKey = " + k.String() + "\nAddress = " + addr + "\nDNS = " + dns + "\n\n[Peer]\nPublicKey = " + peer + "\nEndpoint = " + ep + "\nAllowedIPs = 0.0.0.0/0\n"
	}
	f.server = w("ch.conf", conf(k, "10.2.0.2/32", "10.2.0.1", f.peer.String(), "198.51.100.1:51820"))
	f.serverCopy = w("ch-copy.conf", conf(k, "10.2.0.2/32", "10.2.0.1", f.peer.String(), "198.51.100.1:51820"))
	f.server2 = w("nl.conf", conf(k2, "10.3.0.7/32", "10.3.0.1", f.peer2.String(), "198.51.100.2:51820"))
	return f
}

// base is a structured config that sets every field the cases change.
func (f *reloadFixture) base() *config.Config {
	return &config.Config{
		Name: "trvpn",
		WireGuard: config.WireGuard{
			PrivateKeyFile: f.key,
			Addresses:      []string{"10.2.0.2/32", "fd00::2/128"},
			Peers: []config.Peer{{
				PublicKey: f.peer.String(), Endpoint: "198.51.100.1:51820", AllowedIPs: []string{"0.0.0.0/0", "::/0"},
			}},
		},
		DNS:       config.DNS{Servers: []string{"10.2.0.1"}},
		OpenPorts: []config.Port{{Port: 51413}},
		HostLink: config.HostLink{Enable: true, HostAddress: "10.200.1.1/30", NamespaceAddress: "10.200.1.2/30",
			AccessibleFrom: []string{"192.168.1.0/24"}, PortMappings: []config.PortMapping{{From: 9091, To: 9091}}},
		Health:  config.Health{Probe: &config.Probe{Address: "10.2.0.1:53"}},
		Metrics: config.Metrics{Listen: "127.0.0.1:9586"},
		PortForwarding: &config.PortForwarding{NATPMP: &config.NATPMP{},
			Transmission: &config.App{URL: "http://127.0.0.1:9091/transmission/rpc"},
			QBittorrent:  &config.App{URL: "http://127.0.0.1:8080"}},
	}
}

// sidecarMode is the same config in sidecar mode (which has no host link).
func sidecarMode(c *config.Config) {
	c.HostLink = config.HostLink{}
	c.Sidecar = &config.SidecarOptions{AllowedSubnets: []string{"10.42.0.0/16"},
		ClusterDNS: &config.ClusterDNSOptions{Server: "10.42.0.10", Domains: []string{"cluster.local"}}}
}

// fileBased is the same namespace on a wg-quick file.
func fileBased(c *config.Config, file string) {
	c.WireGuard = config.WireGuard{ConfigFile: file}
	c.DNS.Servers = nil
}

// Issue 21.1: every field of the config is either a live part of a reload
// or refused naming exactly its part; a new field without a case fails.
func TestReloadClassifiesEveryConfigField(t *testing.T) {
	f := newReloadFixture(t)
	type tc struct {
		before, after func(*config.Config) // before (optional) applies to both configs
		live          []string
		refused       []string
	}
	pf := func(c *config.Config) *config.PortForwarding { return c.PortForwarding }
	cases := map[string]tc{
		"name":      {after: func(c *config.Config) { c.Name = "other" }, refused: []string{"name"}},
		"backend":   {after: func(c *config.Config) { c.Backend = "userspace" }, refused: []string{"backend"}},
		"interface": {after: func(c *config.Config) { c.Interface = "wg-other" }, refused: []string{"interface"}},
		"wireguard.configFile": {before: func(c *config.Config) { fileBased(c, f.server) },
			after: func(c *config.Config) { c.WireGuard.ConfigFile = f.serverCopy }, live: []string{"pool"}},
		"wireguard.configFiles": {before: func(c *config.Config) { fileBased(c, f.server) },
			after: func(c *config.Config) { c.WireGuard.ConfigFile, c.WireGuard.ConfigFiles = "", []string{f.server} }},
		"wireguard.privateKeyFile":              {after: func(c *config.Config) { c.WireGuard.PrivateKeyFile = f.key2 }, live: []string{"privateKey"}},
		"wireguard.addresses":                   {after: func(c *config.Config) { c.WireGuard.Addresses[0] = "10.2.0.9/32" }, refused: []string{"addresses"}},
		"wireguard.mtu":                         {after: func(c *config.Config) { c.WireGuard.MTU = 1380 }, refused: []string{"mtu"}},
		"wireguard.listenPort":                  {after: func(c *config.Config) { c.WireGuard.ListenPort = 51999 }, refused: []string{"listenPort"}},
		"wireguard.fwMark":                      {after: func(c *config.Config) { c.WireGuard.FwMark = 7 }, refused: []string{"fwMark"}},
		"wireguard.pinEndpoints":                {after: func(c *config.Config) { c.WireGuard.PinEndpoints = true }, refused: []string{"pinEndpoints"}},
		"wireguard.endpointResolver":            {after: func(c *config.Config) { c.WireGuard.EndpointResolver = "192.0.2.53:53" }, live: []string{"endpointResolver"}},
		"wireguard.peers[].publicKey":           {after: func(c *config.Config) { c.WireGuard.Peers[0].PublicKey = f.peer2.String() }, live: []string{"peers"}},
		"wireguard.peers[].presharedKeyFile":    {after: func(c *config.Config) { c.WireGuard.Peers[0].PresharedKeyFile = f.psk }, live: []string{"peers"}},
		"wireguard.peers[].endpoint":            {after: func(c *config.Config) { c.WireGuard.Peers[0].Endpoint = "198.51.100.9:51820" }, live: []string{"peers"}},
		"wireguard.peers[].allowedIPs":          {after: func(c *config.Config) { c.WireGuard.Peers[0].AllowedIPs = []string{"0.0.0.0/1", "128.0.0.0/1", "::/0"} }, live: []string{"peers"}},
		"wireguard.peers[].persistentKeepalive": {after: func(c *config.Config) { c.WireGuard.Peers[0].PersistentKeepalive = 25 }, live: []string{"peers"}},
		"ipv6":                                  {after: func(c *config.Config) { c.IPv6 = "block" }, refused: []string{"ipv6"}},
		"dns.mode":                              {after: func(c *config.Config) { c.DNS.Mode = "tunnel" }, live: []string{"dns"}},
		"dns.servers":                           {after: func(c *config.Config) { c.DNS.Servers = append(c.DNS.Servers, "10.2.0.53") }, live: []string{"dns"}},
		"dns.search":                            {after: func(c *config.Config) { c.DNS.Search = []string{"example.org"} }, live: []string{"dns"}},
		"openPorts[].port":                      {after: func(c *config.Config) { c.OpenPorts[0].Port = 6881 }, live: []string{"openPorts"}},
		"openPorts[].protocol":                  {after: func(c *config.Config) { c.OpenPorts[0].Protocol = "udp" }, live: []string{"openPorts"}},
		"hostLink.enable":                       {after: func(c *config.Config) { c.HostLink = config.HostLink{} }, refused: []string{"hostLink"}},
		"hostLink.hostAddress": {after: func(c *config.Config) {
			c.HostLink.HostAddress = "10.200.1.2/30"
			c.HostLink.NamespaceAddress = "10.200.1.1/30"
		}, refused: []string{"hostLink"}},
		"hostLink.namespaceAddress": {after: func(c *config.Config) {
			c.HostLink.NamespaceAddress = "10.200.1.1/30"
			c.HostLink.HostAddress = "10.200.1.2/30"
		}, refused: []string{"hostLink"}},
		"hostLink.accessibleFrom":          {after: func(c *config.Config) { c.HostLink.AccessibleFrom = []string{"192.168.2.0/24"} }, refused: []string{"hostLink"}},
		"hostLink.portMappings[].from":     {after: func(c *config.Config) { c.HostLink.PortMappings[0].From = 9092 }, refused: []string{"hostLink"}},
		"hostLink.portMappings[].to":       {after: func(c *config.Config) { c.HostLink.PortMappings[0].To = 9092 }, refused: []string{"hostLink"}},
		"hostLink.portMappings[].protocol": {after: func(c *config.Config) { c.HostLink.PortMappings[0].Protocol = "udp" }, refused: []string{"hostLink"}},
		"hostLink.allowedEgress[].cidr": {before: withEgress,
			after: func(c *config.Config) { c.HostLink.AllowedEgress[0].CIDR = "192.168.1.21" }, refused: []string{"hostLink"}},
		"hostLink.allowedEgress[].protocol": {before: withEgress,
			after: func(c *config.Config) { c.HostLink.AllowedEgress[0].Protocol = "both" }, refused: []string{"hostLink"}},
		"hostLink.allowedEgress[].ports": {before: withEgress,
			after: func(c *config.Config) { c.HostLink.AllowedEgress[0].Ports = []int{445, 139} }, refused: []string{"hostLink"}},
		"health.probe.address":  {after: func(c *config.Config) { c.Health.Probe.Address = "10.2.0.1" }, live: []string{"health"}},
		"health.probe.interval": {after: func(c *config.Config) { c.Health.Probe.Interval = "5s" }, live: []string{"health"}},
		"health.probe.failures": {after: func(c *config.Config) { c.Health.Probe.Failures = 1 }, live: []string{"health"}},
		"health.fast": {after: func(c *config.Config) {
			c.Health.Fast = true
			if c.Health.Probe != nil {
				c.Health.Probe.Interval, c.Health.Probe.Failures = "", 0
			}
		}, live: []string{"health"}},
		"health.preferFirst":            {after: func(c *config.Config) { c.Health.PreferFirst = new(bool) }, live: []string{"health"}},
		"health.standby":                {after: func(c *config.Config) { c.Health.Standby = new(bool) }, live: []string{"health"}},
		"metrics.listen":                {after: func(c *config.Config) { c.Metrics.Listen = "127.0.0.1:9587" }, live: []string{"metrics"}},
		"portForwarding.natpmp.gateway": {after: func(c *config.Config) { pf(c).NATPMP.Gateway = "10.2.0.5" }, live: []string{"portForwarding"}},
		"portForwarding.natpmp.style":   {after: func(c *config.Config) { pf(c).NATPMP.Style = "rfc"; pf(c).NATPMP.InternalPort = 51413 }, live: []string{"portForwarding"}},
		"portForwarding.natpmp.internalPort": {before: func(c *config.Config) { pf(c).NATPMP.Style = "rfc"; pf(c).NATPMP.InternalPort = 51413 },
			after: func(c *config.Config) { pf(c).NATPMP.InternalPort = 6881 }, live: []string{"portForwarding"}},
		"portForwarding.natpmp.protocol":              {after: func(c *config.Config) { pf(c).NATPMP.Protocol = "udp" }, live: []string{"portForwarding"}},
		"portForwarding.natpmp.lifetime":              {after: func(c *config.Config) { pf(c).NATPMP.Lifetime = "120s" }, live: []string{"portForwarding"}},
		"portForwarding.transmission.url":             {after: func(c *config.Config) { pf(c).Transmission.URL = "http://127.0.0.1:9092/transmission/rpc" }, live: []string{"portForwarding"}},
		"portForwarding.transmission.credentialsFile": {after: func(c *config.Config) { pf(c).Transmission.CredentialsFile, pf(c).Transmission.User = f.creds, "root" }, live: []string{"portForwarding"}},
		"portForwarding.transmission.user": {before: func(c *config.Config) { pf(c).Transmission.CredentialsFile, pf(c).Transmission.User = f.creds, "root" },
			after: func(c *config.Config) { pf(c).Transmission.User = "nobody" }, live: []string{"portForwarding"}},
		"portForwarding.qbittorrent.url":             {after: func(c *config.Config) { pf(c).QBittorrent.URL = "http://127.0.0.1:8081" }, live: []string{"portForwarding"}},
		"portForwarding.qbittorrent.credentialsFile": {after: func(c *config.Config) { pf(c).QBittorrent.CredentialsFile, pf(c).QBittorrent.User = f.creds, "root" }, live: []string{"portForwarding"}},
		"portForwarding.qbittorrent.user": {before: func(c *config.Config) { pf(c).QBittorrent.CredentialsFile, pf(c).QBittorrent.User = f.creds, "root" },
			after: func(c *config.Config) { pf(c).QBittorrent.User = "nobody" }, live: []string{"portForwarding"}},
		"portForwarding.onChange": {after: func(c *config.Config) { pf(c).OnChange = []string{"/bin/true"} }, live: []string{"portForwarding"}},
		"portForwarding.onChangeUser": {before: func(c *config.Config) { pf(c).OnChange = []string{"/bin/true"} },
			after: func(c *config.Config) { pf(c).OnChangeUser = "nobody" }, live: []string{"portForwarding"}},
		"memory.packetBuffers": {after: func(c *config.Config) { n := 128; c.Memory.PacketBuffers = &n }, refused: []string{"memory"}},
		"sidecar.allowedSubnets": {before: sidecarMode,
			after: func(c *config.Config) { c.Sidecar.AllowedSubnets = append(c.Sidecar.AllowedSubnets, "10.43.0.0/16") }, refused: []string{"sidecar"}},
		"sidecar.clusterDNS.server": {before: sidecarMode,
			after: func(c *config.Config) { c.Sidecar.ClusterDNS.Server = "10.42.0.11" }, refused: []string{"sidecar"}},
		"sidecar.clusterDNS.domains": {before: sidecarMode,
			after: func(c *config.Config) { c.Sidecar.ClusterDNS.Domains = []string{"cluster.local", "svc.example"} }, refused: []string{"sidecar"}},
	}
	fields := jsonFields(reflect.TypeFor[config.Config](), "")
	for _, path := range fields {
		t.Run(path, func(t *testing.T) {
			c, ok := cases[path]
			if !ok {
				t.Fatalf("no case for config field %s: say whether a reload applies it live or refuses it (engine.SpecParts), and test it here", path)
			}
			resolve := func(edit func(*config.Config)) *config.Spec {
				t.Helper()
				cfg := f.base()
				if c.before != nil {
					c.before(cfg)
				}
				if edit != nil {
					edit(cfg)
				}
				s, err := config.Resolve(cfg, config.Options{})
				if err != nil {
					t.Fatalf("resolve: %v", err)
				}
				return s
			}
			old, next := resolve(nil), resolve(c.after)
			_, live, err := engine.Compare(old.Name, engine.Digests(old), old.ConfigFile(), next)
			var rn *engine.RestartNeeded
			switch {
			case c.refused != nil:
				if !errors.As(err, &rn) || !slices.Equal(rn.Parts, c.refused) {
					t.Errorf("err %v, want refused naming exactly %q", err, c.refused)
				}
			case err != nil || !slices.Equal(live, c.live):
				t.Errorf("live %q err %v, want live %q", live, err, c.live)
			}
		})
	}
	for path := range cases {
		if !slices.Contains(fields, path) {
			t.Errorf("case %s names no field of the config", path)
		}
	}
}

// A pool: a server added, the order changed and a server removed are
// live while the active server stays in it (the namespace stays on that
// server, whatever its index now); a pool without it is refused, naming
// wireguard.configFiles and why.
func TestReloadPool(t *testing.T) {
	f := newReloadFixture(t)
	resolve := func(files ...string) *config.Spec {
		t.Helper()
		c := f.base()
		fileBased(c, "")
		c.WireGuard.ConfigFile, c.WireGuard.ConfigFiles = "", files
		if len(files) == 1 {
			c.WireGuard.ConfigFile, c.WireGuard.ConfigFiles = files[0], nil
		}
		s, err := config.Resolve(c, config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	one, two := resolve(f.server), resolve(f.server, f.server2)
	for _, tc := range []struct {
		name      string
		running   *config.Spec
		next      *config.Spec
		live      []string
		twinIndex int
	}{
		{"server added", one, two, []string{"pool"}, 0},
		{"server removed", two, one, []string{"pool"}, 0},
		{"reordered", two, resolve(f.server2, f.server), []string{"pool"}, 1},
		{"running on the fallback, the first removed", two.Pool[1], resolve(f.server2), []string{"pool"}, 0},
		{"the same pool", two, resolve(f.server, f.server2), nil, 0},
	} {
		twin, live, err := engine.Compare("trvpn", engine.Digests(tc.running), tc.running.ConfigFile(), tc.next)
		if err != nil || !slices.Equal(live, tc.live) || twin == nil || twin.Server != tc.twinIndex || twin.ConfigFile() != tc.running.ConfigFile() {
			t.Errorf("%s: live %q err %v twin %v", tc.name, live, err, twin)
		}
	}
	_, _, err := engine.Compare("trvpn", engine.Digests(two), two.ConfigFile(), resolve(f.server2, f.serverCopy))
	var rn *engine.RestartNeeded
	if !errors.As(err, &rn) || !slices.Equal(rn.Parts, []string{"wireguard.configFiles"}) || !strings.Contains(err.Error(), "leaves out the active server "+f.server) {
		t.Errorf("the active server removed: %v", err)
	}
	// One server, from another file: that server is compared with the
	// active one (here its addresses differ).
	_, _, err = engine.Compare("trvpn", engine.Digests(two), two.ConfigFile(), resolve(f.server2))
	if !errors.As(err, &rn) || !slices.Equal(rn.Parts, []string{"addresses"}) {
		t.Errorf("another single server: %v", err)
	}
}

// Kernel-backend up starts an agent exactly for the fields only an agent
// serves; without them it leaves no process.
func TestAgentFields(t *testing.T) {
	f := newReloadFixture(t)
	resolve := func(edit func(*config.Config)) *config.Spec {
		t.Helper()
		c := f.base()
		edit(c)
		s, err := config.Resolve(c, config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	all := resolve(func(c *config.Config) { fileBased(c, ""); c.WireGuard.ConfigFiles = []string{f.server, f.server2} })
	if got := agentFields(all); !slices.Equal(got, []string{"metrics", "health.probe", "portForwarding", "wireguard.configFiles"}) {
		t.Errorf("agentFields %q", got)
	}
	// The default probe (the server's resolver) is one of them: only
	// "probe": null leaves a kernel namespace without an agent.
	dflt := resolve(func(c *config.Config) { c.Metrics, c.Health, c.PortForwarding = config.Metrics{}, config.Health{}, nil })
	if got := agentFields(dflt); !slices.Equal(got, []string{"health.probe"}) {
		t.Errorf("agentFields with the default probe %q", got)
	}
	none := resolve(func(c *config.Config) {
		c.Metrics, c.Health, c.PortForwarding = config.Metrics{}, config.Health{NoProbe: true}, nil
	})
	if got := agentFields(none); len(got) != 0 {
		t.Errorf("agentFields without them %q", got)
	}
}

// withEgress gives the host link one allowedEgress entry (issue 24.1).
func withEgress(c *config.Config) {
	c.HostLink.AllowedEgress = []config.Egress{{CIDR: "192.168.1.20", Protocol: "tcp", Ports: []int{445}}}
}
