package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

// TestNixOSDocListsEveryDropInSetting: docs/nixos.md's table of what the
// module adds to a confined service names every directive of the confining
// drop-in (agent/unit.Confined, the one source): a directive added there
// without a row here fails.
func TestNixOSDocListsEveryDropInSetting(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "nixos.md"))
	if err != nil {
		t.Fatal(err)
	}
	const section = "## The units it generates"
	text := string(b)
	i := strings.Index(text, section)
	if i < 0 {
		t.Fatalf("docs/nixos.md has no section %q", section)
	}
	text = text[i+len(section):]
	if j := strings.Index(text, "\n## "); j >= 0 {
		text = text[:j]
	}
	var table strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "| ") && strings.Contains(l, "=") {
			table.WriteString(l + "\n")
		}
	}
	n := 0
	for _, s := range unit.Confined() {
		for _, d := range s.Directives {
			n++
			if !strings.Contains(table.String(), "`"+d.Key+"=") && !strings.Contains(table.String(), " "+d.Key+"=") {
				t.Errorf("docs/nixos.md's table of confined-service settings has no row for %s= (agent/unit.Confined)", d.Key)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d directives in unit.Confined(): the check proves little", n)
	}
}
