package policy

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOutOfFilesIsAnError: a netlink socket that cannot be opened in the
// namespace (EMFILE) is an error, not a nil connection used later (a panic).
// mdlayher/socket before v0.6.0 dropped socket()'s error in its namespace
// path and returned (nil, nil). The check runs in a child process whose
// RLIMIT_NOFILE leaves room for the namespace file and the netlink
// library's own handle of the thread's namespace, but not for the socket.
func TestOutOfFilesIsAnError(t *testing.T) {
	if os.Getenv("VPNC_EMFILE_CHILD") == "1" {
		emfileChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOutOfFilesIsAnError$", "-test.v")
	cmd.Env = append(os.Environ(), "VPNC_EMFILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "EMFILE-ERROR:") {
		t.Fatalf("Inspect with no file descriptor left must return an error (err %v):\n%s", err, out)
	}
	t.Logf("%s", lineWith(string(out), "EMFILE-ERROR:"))
}

func emfileChild() {
	// Warm up what the runtime opens lazily (the poller's epoll fd).
	if f, err := os.Open("/proc/self/ns/net"); err == nil {
		f.Close()
	}
	// The lowest two free descriptor numbers are what the namespace file
	// and the library's /proc/thread-self/ns/net get; a limit just above
	// the second leaves none for the socket.
	var free []uint64
	for fd := 0; len(free) < 2; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			free = append(free, uint64(fd))
		}
	}
	lim := unix.Rlimit{Cur: free[1] + 1, Max: free[1] + 1}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		panic(err)
	}
	_, err := Inspect("/proc/self/ns/net", "vpnc-emfile-none")
	os.Stdout.WriteString("EMFILE-ERROR: " + errString(err) + "\n")
	if err == nil {
		os.Exit(3)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
