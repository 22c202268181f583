package config

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const nobody = 65534

func wantErr(t *testing.T, err error, field string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %s: %v", field, parts)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, field+": ") {
		t.Errorf("error %q does not name %s", msg, field)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("error %q does not contain %q", msg, p)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
}

func TestSecretFileChecks(t *testing.T) {
	f := newFixture(t)
	cfg := func(p string) map[string]any {
		return map[string]any{"name": "proton", "wireguard": map[string]any{"configFile": p}}
	}
	t.Run("a root-owned file through a root-owned link is read", func(t *testing.T) {
		link := filepath.Join(f.dir, "link.conf")
		if err := os.Symlink("wg.conf", link); err != nil {
			t.Fatal(err)
		}
		if _, err := resolveJSON(t, cfg(link)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		_, err := resolveJSON(t, cfg(f.dir))
		wantErr(t, err, "wireguard.configFile", "is a directory")
		if strings.Count(err.Error(), f.dir) != 1 {
			t.Errorf("path repeated: %q", err)
		}
	})
	t.Run("a fifo does not hang", func(t *testing.T) {
		p := filepath.Join(f.dir, "fifo")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := resolveJSON(t, cfg(p))
		wantErr(t, err, "wireguard.configFile", "not a regular file")
	})
	t.Run("larger than 1 MiB", func(t *testing.T) {
		p := filepath.Join(f.dir, "big.conf")
		write(t, p, strings.Repeat("#\n", maxFileSize), 0o600)
		_, err := resolveJSON(t, cfg(p))
		wantErr(t, err, "wireguard.configFile", "larger than 1 MiB")
	})
	t.Run("owned by another user", func(t *testing.T) {
		needRoot(t)
		p := filepath.Join(f.dir, "theirs.conf")
		b, _ := os.ReadFile(f.wgFile)
		write(t, p, string(b), 0o600)
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, err := resolveJSON(t, cfg(p))
		wantErr(t, err, "wireguard.configFile", "owned by uid 65534", "chown root")
	})
	t.Run("through a link another user owns", func(t *testing.T) {
		needRoot(t)
		// A nobody-owned link pointing at root's key: the attack of a
		// config that names someone else's secret.
		link := filepath.Join(f.dir, "evil.conf")
		if err := os.Symlink(f.wgFile, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(link, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, err := resolveJSON(t, cfg(link))
		wantErr(t, err, "wireguard.configFile", "symbolic link", "owned by uid 65534")
	})
	t.Run("a link loop", func(t *testing.T) {
		a, b := filepath.Join(f.dir, "a"), filepath.Join(f.dir, "b")
		os.Symlink(b, a)
		os.Symlink(a, b)
		_, err := resolveJSON(t, cfg(a))
		wantErr(t, err, "wireguard.configFile", "too many levels")
	})
}

func TestConfigFileChecks(t *testing.T) {
	f := newFixture(t)
	body := `{"name":"proton","wireguard":{"configFile":"` + f.wgFile + `"}}`
	p := filepath.Join(f.dir, "proton.json")
	write(t, p, body, 0o644)
	if _, err := LoadSpec(p, Options{}); err != nil {
		t.Fatalf("a 0644 root config: %v", err)
	}
	write(t, p, body, 0o666)
	_, err := LoadSpec(p, Options{})
	wantErr(t, err, "--config", "writable by group or others (mode 0666)", "chmod 644")
	_, err = LoadSpec(f.dir, Options{})
	wantErr(t, err, "--config", "is a directory")
	if strings.Count(err.Error(), f.dir) != 1 {
		t.Errorf("path repeated: %q", err)
	}
	t.Run("owned by another user", func(t *testing.T) {
		needRoot(t)
		write(t, p, body, 0o644)
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, err := LoadSpec(p, Options{})
		wantErr(t, err, "--config", "owned by uid 65534")
		// Build-time validation runs unprivileged and reads no secret.
		if _, err := LoadSpec(p, Options{Static: true}); err != nil {
			t.Errorf("static: %v", err)
		}
	})
}

// Options.Seen hears of every file LoadSpec reads (status keys what it
// derives from them by their identity and content): the config, the key
// file, each wg-quick file of a pool, each with what fstat said of it and
// the content read.
func TestLoadSpecReportsEveryFileRead(t *testing.T) {
	f := newFixture(t)
	nl := f.secondServer(t, "10.3.0.1", "198.51.100.2:51820")
	for name, wg := range map[string]map[string]any{
		"structured, a key file":   f.structured()["wireguard"].(map[string]any),
		"a pool of wg-quick files": {"configFiles": []any{f.wgFile, nl}},
	} {
		cfg := filepath.Join(f.dir, "config.json")
		c := f.structured()
		c["wireguard"] = wg
		write(t, cfg, string(marshal(t, c)), 0o600)
		seen, secret, data := map[string]os.FileInfo{}, map[string]bool{}, map[string]string{}
		if _, err := LoadSpec(cfg, Options{Seen: func(p string, s bool, st os.FileInfo, b []byte) { seen[p], secret[p], data[p] = st, s, string(b) }}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := []string{cfg, f.keyFile}
		if _, ok := wg["configFiles"]; ok {
			want = []string{cfg, f.wgFile, nl}
		}
		if len(seen) != len(want) {
			t.Errorf("%s: seen %v, want %v", name, seen, want)
		}
		for _, p := range want {
			st, err := os.Stat(p)
			if seen[p] == nil || err != nil || !os.SameFile(seen[p], st) || seen[p].Size() != st.Size() {
				t.Errorf("%s: %s seen as %v (the file: %v, %v)", name, p, seen[p], st, err)
			}
			if secret[p] != (p != cfg) {
				t.Errorf("%s: %s seen as secret: %v", name, p, secret[p])
			}
			if b, _ := os.ReadFile(p); data[p] != string(b) || b == nil {
				t.Errorf("%s: %s seen with %d bytes, not its content (%d bytes)", name, p, len(data[p]), len(b))
			}
			// ReadTrusted, under the same rule, names the same file and
			// gives the same content.
			if again, b, err := ReadTrusted(p, secret[p]); err != nil || !os.SameFile(again, st) || again.ModTime() != st.ModTime() || string(b) != data[p] {
				t.Errorf("%s: ReadTrusted(%s) = %v, %d bytes, %v", name, p, again, len(b), err)
			}
		}
	}
	// What LoadSpec would refuse, ReadTrusted refuses: a secret readable
	// by others, a config others may write, a link to it.
	os.Chmod(f.keyFile, 0o640)
	if _, _, err := ReadTrusted(f.keyFile, true); err == nil {
		t.Error("ReadTrusted: a key file readable by the group passed")
	}
	cfg := filepath.Join(f.dir, "open.json")
	write(t, cfg, "{}", 0o666)
	if _, _, err := ReadTrusted(cfg, false); err == nil {
		t.Error("ReadTrusted: a world-writable config passed")
	}
}

// What status's key over the files costs per file, beside what it cost
// before it covered their content: open and fstat (the trust checks
// included) against the same and a read and a SHA-256 of the content, of
// a config and a wg-quick file as big as the ones deployed (a few hundred
// bytes).
func BenchmarkTrustedFileKey(b *testing.B) {
	dir := b.TempDir()
	wg := filepath.Join(dir, "wg.conf")
	if err := os.WriteFile(wg, []byte(strings.Repeat("# a wg-quick file of ~400 bytes\n", 13)), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("open+fstat", func(b *testing.B) {
		for b.Loop() {
			f, _, err := openTrusted(wg, secretRule("file"))
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("open+fstat+read+sha256", func(b *testing.B) {
		for b.Loop() {
			_, data, err := ReadTrusted(wg, true)
			if err != nil {
				b.Fatal(err)
			}
			sha256.Sum256(data)
		}
	})
}
