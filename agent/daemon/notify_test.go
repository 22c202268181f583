package daemon

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A listener that never reads (its queue full) cannot stall the agent.
func TestNotifyNeverBlocks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.SetReadBuffer(1024)
	t.Setenv("NOTIFY_SOCKET", p)
	start := time.Now()
	var failed int
	for i := 0; i < 2000; i++ {
		if Notify("WATCHDOG=1") != nil {
			failed++
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("2000 notifications to a full queue took %v", d)
	}
	if failed == 0 {
		t.Error("the queue never filled: the test proves nothing")
	}
	// Positive control: a reader gets the message.
	l2, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p + "2", Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	t.Setenv("NOTIFY_SOCKET", p+"2")
	if err := Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	l2.SetReadDeadline(time.Now().Add(time.Second))
	n, err := l2.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

func TestAfterReady(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "/run/x")
	t.Setenv("WATCHDOG_USEC", "30000000")
	afterReady()
	if v, ok := lookup("NOTIFY_SOCKET"); !ok || v != "/run/x" {
		t.Fatal("the watchdog's socket was dropped")
	}
	t.Setenv("WATCHDOG_USEC", "")
	afterReady()
	if _, ok := lookup("NOTIFY_SOCKET"); ok {
		t.Fatal("NOTIFY_SOCKET kept after READY without a watchdog")
	}
	if Notify("STATUS=x") != nil {
		t.Fatal("Notify without a socket must do nothing")
	}
}

func lookup(k string) (string, bool) { return os.LookupEnv(k) }
