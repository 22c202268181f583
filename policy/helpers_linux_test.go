package policy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// requireKernel skips unless the test can create namespaces and load
// nftables: root, with ip and nft installed.
func requireKernel(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces, nftables")
	testenv.NeedTools(t, "ip", "nft")
}

// newNS creates a uniquely named network namespace, removed at cleanup.
// IPv6 is disabled in it unless a test turns it on for one interface, so
// no autoconfiguration noise reaches the counters.
func newNS(t testing.TB) (name, path string) {
	t.Helper()
	name = testns.ID(t, "pt") + "n" // a testbed ID: unique, and swept if this test dies
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	nsRun(t, name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name, filepath.Join("/run/netns", name)
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func nsRun(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return run(t, append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// nftLoad loads nft text into a namespace, after checking it with nft -c.
func nftLoad(t testing.TB, ns, text string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ruleset.nft")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	nsRun(t, ns, "nft", "-c", "-f", f)
	nsRun(t, ns, "nft", "-f", f)
}

// nftTable is the part of `nft -j list table` the tests look at.
type nftTable struct {
	rules    []nftRule
	sets     map[string][]string
	counters map[string]bool
	tables   int
}

type nftRule struct {
	Chain   string `json:"chain"`
	Comment string `json:"comment"`
}

func nftJSON(t *testing.T, ns, table string) nftTable {
	t.Helper()
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(nsRun(t, ns, "nft", "-j", "list", "table", "inet", table)), &doc); err != nil {
		t.Fatal(err)
	}
	out := nftTable{sets: map[string][]string{}, counters: map[string]bool{}}
	for _, obj := range doc.Nftables {
		switch {
		case obj["table"] != nil:
			out.tables++
		case obj["rule"] != nil:
			var r nftRule
			if err := json.Unmarshal(obj["rule"], &r); err != nil {
				t.Fatal(err)
			}
			out.rules = append(out.rules, r)
		case obj["counter"] != nil:
			var c struct{ Name string }
			if err := json.Unmarshal(obj["counter"], &c); err != nil {
				t.Fatal(err)
			}
			out.counters[c.Name] = true
		case obj["set"] != nil:
			var s struct {
				Name string
				Elem []json.RawMessage
			}
			if err := json.Unmarshal(obj["set"], &s); err != nil {
				t.Fatal(err)
			}
			elems := []string{}
			for _, e := range s.Elem {
				elems = append(elems, jsonElem(t, e))
			}
			slices.Sort(elems)
			out.sets[s.Name] = elems
		}
	}
	return out
}

// jsonElem turns an nft JSON set element into the text nft prints.
func jsonElem(t *testing.T, raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return strconv.Itoa(n)
	}
	var p struct {
		Prefix struct {
			Addr string
			Len  int
		}
	}
	if json.Unmarshal(raw, &p) == nil && p.Prefix.Addr != "" {
		return fmt.Sprintf("%s/%d", p.Prefix.Addr, p.Prefix.Len)
	}
	t.Fatalf("unexpected set element %s", raw)
	return ""
}

// expectedSets is the Ruleset's set elements as Render writes them
// (sorted), what nft must list once Apply loaded them.
func expectedSets(r *policy.Ruleset) map[string][]string {
	out := map[string][]string{}
	for _, s := range r.Sets {
		elems := append([]string{}, policy.SetElements(&s)...)
		slices.Sort(elems)
		out[s.Name] = elems
	}
	return out
}

// bytecode returns `nft --debug=netlink list table`: the kernel's
// bytecode of every rule and the elements of every set, normalised so two
// loads of the same table compare equal (handles removed, set elements
// sorted: hash sets dump in hash order).
func bytecode(t *testing.T, ns, table string) string {
	t.Helper()
	out := nsRun(t, ns, "nft", "--debug=netlink", "list", "table", "inet", table)
	var blocks [][]string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "inet ") {
			f := strings.Fields(l)
			for len(f) > 0 {
				if _, err := strconv.Atoi(f[len(f)-1]); err != nil {
					break
				}
				f = f[:len(f)-1]
			}
			blocks = append(blocks, []string{strings.Join(f, " ")})
			continue
		}
		if len(blocks) == 0 || strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, "table ") {
			break // the listing itself follows the debug output
		}
		blocks[len(blocks)-1] = append(blocks[len(blocks)-1], l)
	}
	var b strings.Builder
	for _, blk := range blocks {
		if strings.Contains(blk[0], " @") {
			slices.Sort(blk[1:])
		}
		b.WriteString(strings.Join(blk, "\n") + "\n")
	}
	return b.String()
}

// inNS runs f on an OS thread switched into the namespace, so sockets
// f creates live there (they stay there after f returns).
func inNS(t testing.TB, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the original namespace: " + err.Error())
		}
	}()
	f()
}

// counter returns a named counter's packets via Inspect.
func counter(t *testing.T, nsPath, table, name string) uint64 {
	t.Helper()
	st, err := policy.Inspect(nsPath, table)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := st.Counter(name)
	if !ok {
		t.Fatalf("no counter %q in %s", name, table)
	}
	return c.Packets
}

// txPackets returns an interface's transmitted packet count.
func txPackets(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	var links []struct {
		Stats64 struct {
			Tx struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("link stats of %s: %v", dev, err)
	}
	return links[0].Stats64.Tx.Packets
}
