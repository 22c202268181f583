package config

import (
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
// derives from them by their identity): the config, the key file, each
// wg-quick file of a pool, each with what fstat said of it.
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
		seen, secret := map[string]os.FileInfo{}, map[string]bool{}
		if _, err := LoadSpec(cfg, Options{Seen: func(p string, s bool, st os.FileInfo) { seen[p], secret[p] = st, s }}); err != nil {
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
			// StatTrusted, under the same rule, names the same file.
			if again, err := StatTrusted(p, secret[p]); err != nil || !os.SameFile(again, st) || again.ModTime() != st.ModTime() {
				t.Errorf("%s: StatTrusted(%s) = %v, %v", name, p, again, err)
			}
		}
	}
	// What LoadSpec would refuse, StatTrusted refuses: a secret readable
	// by others, a config others may write, a link to it.
	os.Chmod(f.keyFile, 0o640)
	if _, err := StatTrusted(f.keyFile, true); err == nil {
		t.Error("StatTrusted: a key file readable by the group passed")
	}
	cfg := filepath.Join(f.dir, "open.json")
	write(t, cfg, "{}", 0o666)
	if _, err := StatTrusted(cfg, false); err == nil {
		t.Error("StatTrusted: a world-writable config passed")
	}
}
