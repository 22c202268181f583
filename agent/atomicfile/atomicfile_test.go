package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, s := range []string{"one\n", "two\n"} {
		if err := Write(p, []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		st, _ := os.Stat(p)
		if err != nil || string(b) != s || st.Mode().Perm() != 0o640 {
			t.Fatalf("read %q (%v), mode %v", b, err, st.Mode())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := Write(filepath.Join(dir, "no", "such"), nil, 0o600); err == nil {
		t.Error("a missing directory passed")
	}
}
