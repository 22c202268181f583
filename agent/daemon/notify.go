// Package daemon is `vpn-agent run`: it brings a namespace up, tells
// systemd it is ready only once the namespace, tunnel and kill switch are
// all in place, watches them and repairs what breaks, and tears everything
// down on SIGTERM.
package daemon

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Notify sends an sd_notify(3) message to $NOTIFY_SOCKET. Without the
// variable (not started by systemd) it does nothing.
func Notify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
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
