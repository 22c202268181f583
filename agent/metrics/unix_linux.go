package metrics

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// socketUmask makes bind(2) create the socket mode 0660 (0777 &^ 0117):
// the mode is given at creation, never set afterwards by path (a chmod
// by path follows whatever is at the path by then).
const socketUmask = 0o117

// listenUnix creates the socket's missing directories (root's, 0755),
// removes a stale socket at path and binds a new one of mode 0660. It
// runs on a thread of its own that has unshared its filesystem
// attributes (CLONE_FS), so the umask it sets is that thread's alone;
// the thread stays locked and is discarded when done (never the main
// thread, which Go keeps). The caller has
// checked the directories (config.CheckSocketDir).
func listenUnix(path string) (*net.UnixListener, error) {
	type result struct {
		ln  *net.UnixListener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread, which Go never ends (it would keep the
			// umask, and show it in /proc/PID/status): while this
			// goroutine holds it, the next one runs on another.
			ln, err := listenUnix(path)
			runtime.UnlockOSThread()
			ch <- result{ln, err}
			return
		}
		ln, err := func() (*net.UnixListener, error) {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return nil, fmt.Errorf("unshare filesystem attributes: %w", err)
			}
			unix.Umask(0o022)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, err
			}
			if err := removeStale(path); err != nil {
				return nil, &config.FieldError{Field: "metrics.listen", Msg: err.Error(), Fix: "remove the file or choose another path"}
			}
			unix.Umask(socketUmask)
			return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		}()
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
