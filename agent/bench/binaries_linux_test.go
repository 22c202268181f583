package bench

import (
	"os/exec"
	"strings"
	"testing"
)

// The reference is stock wireguard-go of exactly the module version the
// agent embeds: built from this module, its build info says so; a binary
// of any other (or no) version is refused as the reference.
func TestReferenceIsTheEmbeddedVersion(t *testing.T) {
	want := embeddedWG()
	if !strings.HasPrefix(want, "v") {
		t.Fatalf("embedded wireguard-go module version %q", want)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs go to build the reference")
	}
	b, err := buildReference(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b.Module != want || !strings.HasPrefix(b.Version, "wireguard-go v") {
		t.Errorf("built reference: module %q (want %q), version %q", b.Module, want, b.Version)
	}
	ref, _, why := findReferences(want, b.Path, t.TempDir())
	if ref == nil || ref.Path != b.Path {
		t.Errorf("--reference-bin of the same version refused: %s", why)
	}
	// Negative control: a binary without that module version.
	if ref, _, why := findReferences(want, "/bin/true", t.TempDir()); ref != nil || !strings.Contains(why, "not the embedded") {
		t.Errorf("--reference-bin /bin/true accepted as the reference (%q)", why)
	}
}

func TestMergeJSON(t *testing.T) {
	base := map[string]any{"name": "x", "wireguard": map[string]any{"mtu": 1420, "peers": []any{1}}}
	got, err := mergeJSON(base, `{"memory":{"packetBuffers":0},"wireguard":{"mtu":1280}}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"memory":{"packetBuffers":0},"name":"x","wireguard":{"mtu":1280,"peers":[1]}}`
	if s := strings.Join(strings.Fields(string(got)), ""); s != want {
		t.Errorf("merged %s, want %s", s, want)
	}
	if _, err := mergeJSON(base, `[1]`); err == nil {
		t.Error("a fragment that is no object was accepted")
	}
}
