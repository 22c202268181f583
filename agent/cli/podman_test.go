package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

func TestPodmanFlags(t *testing.T) {
	var out bytes.Buffer
	if rc := cmdPodmanFlags([]string{"proton"}, &out); rc != ExitOK {
		t.Fatalf("podman-flags proton: exit %d", rc)
	}
	if got, want := out.String(), strings.Join(unit.PodmanFlags("proton"), "\n")+"\n"; got != want {
		t.Errorf("podman-flags proton printed\n%s\nwant\n%s", got, want)
	}

	// --why: every flag follows its reason, as comments.
	out.Reset()
	if rc := cmdPodmanFlags([]string{"--why", "proton"}, &out); rc != ExitOK {
		t.Fatalf("podman-flags --why proton: exit %d", rc)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var flags []string
	for i, l := range lines {
		if !strings.HasPrefix(l, "#") {
			flags = append(flags, l)
			if i == 0 || !strings.HasPrefix(lines[i-1], "# ") {
				t.Errorf("%q has no reason above it", l)
			}
		}
	}
	if strings.Join(flags, "\n") != strings.Join(unit.PodmanFlags("proton"), "\n") {
		t.Errorf("--why changed the flags: %q", flags)
	}

	// Bad input: exit 2, nothing on stdout.
	f := newReloadFixture(t)
	cfg := filepath.Join(f.dir, "trvpn.json")
	b, err := json.Marshal(f.base())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"Bad_Name"}, {}, {"a", "b"}, {"proton", "--config", cfg}, {"proton", "--config", filepath.Join(f.dir, "absent.json")}} {
		out.Reset()
		if rc := cmdPodmanFlags(args, &out); rc != ExitBadInput || out.Len() != 0 {
			t.Errorf("podman-flags %q: exit %d, stdout %q; want exit 2 and nothing", args, rc, out.String())
		}
	}
	out.Reset()
	if rc := cmdPodmanFlags([]string{"trvpn", "--config", cfg}, &out); rc != ExitOK || !strings.Contains(out.String(), "--network=ns:/run/netns/trvpn\n") {
		t.Errorf("podman-flags trvpn --config (its own config): exit %d, %q", rc, out.String())
	}
}
