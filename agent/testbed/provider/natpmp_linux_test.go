package provider_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// The NAT-PMP lab, ProtonVPN's addressing on veths:
//
//	client (10.2.0.2) --eth0/tun0-- gateway (10.2.0.1; public 198.18.2.2) --up0/eth0-- internet (198.18.2.1)
var (
	labGW       = netip.MustParseAddr("10.2.0.1")
	labClient   = netip.MustParseAddr("10.2.0.2")
	labPublic   = netip.MustParseAddr("198.18.2.2")
	labInternet = netip.MustParseAddr("198.18.2.1")
)

type pmpLab struct {
	gw, client, inet string // namespaces
	prov             *provider.Provider
	log              string
}

// newPMPLab builds the lab and starts a provider with gateway c in it
// (Listen and Public filled in); everything goes at cleanup.
func newPMPLab(t *testing.T, c provider.NATPMP) *pmpLab {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces, nftables")
	id := testns.ID(t, testbed.TopologyPrefix)
	l := &pmpLab{gw: id + "g", client: id + "k", inet: id + "n", log: filepath.Join(t.TempDir(), "provider.log")}
	t.Cleanup(func() {
		if l.prov != nil {
			l.prov.Close()
		}
	})
	for _, ns := range []string{l.gw, l.client, l.inet} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
	}
	pfx := func(a netip.Addr) []netip.Prefix { return []netip.Prefix{netip.PrefixFrom(a, 24)} }
	if err := testbed.AddVeth(testbed.End{NS: l.client, Name: "eth0", Addrs: pfx(labClient), NoIPv6: true},
		testbed.End{NS: l.gw, Name: "tun0", Addrs: pfx(labGW), NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	if err := testbed.AddVeth(testbed.End{NS: l.gw, Name: "up0", Addrs: pfx(labPublic), NoIPv6: true},
		testbed.End{NS: l.inet, Name: "eth0", Addrs: pfx(labInternet), NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	if err := testbed.AddRoute(l.client, netip.Prefix{}, labGW); err != nil {
		t.Fatal(err)
	}
	c.Listen = netip.AddrPortFrom(labGW, 5351).String()
	c.Public = labPublic.String()
	err := testbed.Do(l.gw, func() (err error) {
		l.prov, err = provider.Start(&provider.Config{Log: l.log, NATPMP: &c})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// natpmpc runs the natpmpc client in the client namespace.
func (l *pmpLab) natpmpc(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("natpmpc"); err != nil {
		t.Fatal("natpmpc is not installed (scripts/deps.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + names.Netns(l.client), "--", "natpmpc", "-g", labGW.String()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("natpmpc %v: %v: %s", args, err, out)
	}
	return string(out)
}

// natpmpc's report of a mapping (Debian 12's natpmpc prints "liftime").
type pmpcResult struct {
	public             netip.Addr
	external, internal uint16
	proto              string
	lifetime           int
	epoch              int // the mapping response's
}

var (
	pmpcPublicRE = regexp.MustCompile(`(?m)^Public IP address : (\S+)$`)
	pmpcMappedRE = regexp.MustCompile(`(?m)^Mapped public port (\d+) protocol (UDP|TCP) to local port (\d+) (?:liftime|lifetime) (\d+)$`)
	pmpcEpochRE  = regexp.MustCompile(`(?m)^epoch = (\d+)$`)
)

func parseNATPMPC(t *testing.T, out string) pmpcResult {
	t.Helper()
	pm, mm := pmpcPublicRE.FindStringSubmatch(out), pmpcMappedRE.FindStringSubmatch(out)
	em := pmpcEpochRE.FindAllStringSubmatch(out, -1)
	if pm == nil || mm == nil || len(em) != 2 {
		t.Fatalf("natpmpc output not understood:\n%s", out)
	}
	var r pmpcResult
	var err error
	if r.public, err = netip.ParseAddr(pm[1]); err != nil {
		t.Fatal(err)
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	r.external, r.proto, r.internal, r.lifetime = uint16(num(mm[1])), strings.ToLower(mm[2]), uint16(num(mm[3])), num(mm[4])
	r.epoch = num(em[1][1])
	return r
}

func mappings(t *testing.T, c provider.NATPMPControl) []provider.Mapping {
	t.Helper()
	ms, err := c.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// listen opens a TCP listener and a UDP socket on port in the client
// namespace that answer "hit PORT".
func (l *pmpLab) listen(t *testing.T, port uint16) {
	t.Helper()
	var ln net.Listener
	var uc net.PacketConn
	err := testbed.Do(l.client, func() (err error) {
		if ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		uc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); uc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hit %d\n", port)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := uc.ReadFrom(buf)
			if err != nil {
				return
			}
			uc.WriteTo([]byte(fmt.Sprintf("hit %d %s", port, buf[:n])), from)
		}
	}()
}

// reach reports what a TCP connection (or a UDP datagram) from the
// internet to public:port gets back: "hit N" from the client's socket
// on N, or "" (refused, or no answer within a second).
func (l *pmpLab) reach(t *testing.T, proto string, port uint16) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := testbed.DialIn(ctx, l.inet, proto+"4", netip.AddrPortFrom(labPublic, port).String())
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if proto == "udp" {
		c.Write([]byte("ping"))
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		return strings.TrimSuffix(string(buf[:n]), " ping")
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}
