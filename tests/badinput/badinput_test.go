// Package badinput runs vpn-agent on malformed configs and wg-quick files
// and proves each one fails with a one-line error naming the field, exit
// code 2, and no change at all to the system: the namespace, link, nft and
// file listings are compared before and after every command.
package badinput

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

var agentBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("badinput: skipped, needs root (network namespaces, nftables)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "badinput-")
	if err != nil {
		panic(err)
	}
	agentBin = filepath.Join(dir, "vpn-agent")
	out, err := exec.Command("go", "build", "-o", agentBin, "../../agent/cmd/vpn-agent").CombinedOutput()
	if err != nil {
		fmt.Printf("build vpn-agent: %v\n%s", err, out)
		os.Exit(1)
	}
	rc := m.Run()
	os.RemoveAll(dir)
	os.Exit(rc)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// hostNS is a private network namespace standing in for the host, so the
// snapshot sees only what the agent under test could change.
func hostNS(t *testing.T) string {
	t.Helper()
	name := "bih-" + randHex(4)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// snapshot lists everything the agent could have changed.
func snapshot(t *testing.T, host, name string) string {
	t.Helper()
	var b strings.Builder
	run := func(args ...string) {
		out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
		fmt.Fprintf(&b, "$ %s\n%s\n", strings.Join(args, " "), out)
	}
	run("nsenter", "--net=/run/netns/"+host, "ip", "-o", "link", "show")
	run("nsenter", "--net=/run/netns/"+host, "ip", "-o", "addr", "show")
	run("nsenter", "--net=/run/netns/"+host, "nft", "list", "ruleset")
	for _, dir := range []string{"/run/netns", "/etc/netns", "/run/vpn-confinement", "/var/run/wireguard"} {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			if strings.Contains(e.Name(), name) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "%s: %v\n", dir, names)
	}
	return b.String()
}

// agent runs vpn-agent in the host namespace with a deadline.
func agent(t *testing.T, host string, args ...string) (rc int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + host, agentBin}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("vpn-agent %v did not exit on bad input", args)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

type keys struct{ priv, pub, psk string }

func newKeys(t *testing.T) keys {
	p, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	q, _ := wgtypes.GeneratePrivateKey()
	s, _ := wgtypes.GenerateKey()
	return keys{p.String(), q.PublicKey().String(), s.String()}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
