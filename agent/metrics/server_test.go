package metrics

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

func TestListenUnix(t *testing.T) {
	path := filepath.Join(testenv.RootDir(t), "m.sock")
	// A stale socket file (its listener gone without unlinking) is replaced.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	s, _ := fakeSpec(t)
	m := New(s)
	m.Ready()
	l := &config.Listen{Network: "unix", Address: path}
	srv, err := Listen(l, m.Handler(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	// A live socket is in use: a second server fails, naming the field.
	_, err = Listen(l, m.Handler(nil), nil)
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "metrics.listen" {
		t.Errorf("second listen: %v, want a metrics.listen FieldError", err)
	}
	c := http.Client{Transport: &http.Transport{Dial: func(string, string) (net.Conn, error) { return net.Dial("unix", path) }}}
	resp, err := c.Get("http://agent/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ready\n" {
		t.Errorf("/readyz over the socket: %d %q", resp.StatusCode, b)
	}
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	// Any other file at the path is left alone.
	os.WriteFile(path, nil, 0o600)
	if _, err := Listen(l, m.Handler(nil), nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listen over a regular file: %v", err)
	}
}

func TestListenUnixMakesDir(t *testing.T) {
	path := filepath.Join(testenv.RootDir(t), "vpn-confinement", "m.sock") // as /run/vpn-confinement before the first up
	s, _ := fakeSpec(t)
	srv, err := Listen(&config.Listen{Network: "unix", Address: path}, New(s).Handler(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	// Made root's, 0755, whatever the process's umask.
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("made directory: %v %v, want root's, mode 0755", fi.Mode(), err)
	}
}

func TestListenTCPInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, _ := fakeSpec(t)
	_, err = Listen(&config.Listen{Network: "tcp", Address: ln.Addr().String()}, New(s).Handler(nil), nil)
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "metrics.listen" || !strings.Contains(err.Error(), "address already in use") || strings.Contains(err.Error(), "\n") {
		t.Errorf("listen on a used port: %v, want one line naming metrics.listen", err)
	}
}
