// Package daemon is `vpn-agent run`: it brings a namespace up, tells
// systemd it is ready only once the namespace, tunnel and kill switch are
// all in place, watches them and repairs what breaks, and tears everything
// down on SIGTERM.
package daemon

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Notify sends an sd_notify(3) message to $NOTIFY_SOCKET. Without the
// variable (not started by systemd, or no longer listening) it does
// nothing. It never blocks: a receiver whose queue is full (a stalled or
// hostile listener) makes it fail at once, so the watchdog loop never waits
// on it.
func Notify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract socket
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte(state), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, &unix.SockaddrUnix{Name: addr}); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// afterReady stops notifying once READY=1 is sent, unless systemd's
// watchdog expects WATCHDOG=1: `vpn-agent up` listens only until READY,
// and a socket path nobody listens on any more is one someone else could
// bind.
func afterReady() {
	if WatchdogInterval() == 0 {
		os.Unsetenv("NOTIFY_SOCKET")
	}
}

// WatchdogInterval returns half of systemd's WatchdogSec for this process,
// or 0 when the watchdog is off.
func WatchdogInterval() time.Duration {
	us, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || us <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(us) * time.Microsecond / 2
}
