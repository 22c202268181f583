package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// ExecError is a command Exec could not start: Code is the shell's exit
// status for it, 127 (not found) or 126 (found, not executable).
type ExecError struct {
	Code int
	Cmd  string
	Err  error
}

func (e *ExecError) Error() string {
	if e.Code == 127 {
		return fmt.Sprintf("%s: command not found", e.Cmd)
	}
	return fmt.Sprintf("%s: cannot execute: %v", e.Cmd, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// Exec replaces the current process with argv running inside the named
// namespace as the caller, the way `ip netns exec` does: in a private
// mount namespace set up by privateMounts, with /sys remounted to show
// the namespace's interfaces. The command's exit status is the process's
// (execve). It only returns on error. As root the command keeps every
// capability: it can leave the namespace (setns) and is no confinement for
// untrusted code; ExecAs is.
func Exec(name string, argv []string, env []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command given")
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return err
	}
	ns, err := Open(name)
	if err != nil {
		return err
	}
	// From here the thread's namespaces change; execve keeps only this
	// thread, so the whole new program runs in them.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := privateMounts(name); err != nil {
		return err
	}
	if err := vnetns.Set(ns); err != nil {
		return fmt.Errorf("enter netns %q: %w", name, err)
	}
	ns.Close()
	mountSys(name)
	return execve(path, argv, env)
}

// lookPath finds argv0 as a shell would (the process's PATH), or says why
// not as an *ExecError.
func lookPath(argv0 string) (string, error) {
	path, err := exec.LookPath(argv0)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return "", &ExecError{Code: 127, Cmd: argv0, Err: err}
		}
		return "", &ExecError{Code: 126, Cmd: argv0, Err: unwrapPathErr(err)}
	}
	return path, nil
}

// execve runs path in place of this process; it only returns on error.
func execve(path string, argv, env []string) error {
	return execErr(argv[0], path, unix.Exec(path, argv, env))
}

// execErr is err from an execve of path as an *ExecError when a shell
// would give it 127 or 126.
func execErr(argv0, path string, err error) error {
	switch err {
	case unix.ENOENT:
		return &ExecError{Code: 127, Cmd: argv0, Err: err}
	case unix.EACCES, unix.ENOEXEC, unix.EPERM, unix.EISDIR:
		return &ExecError{Code: 126, Cmd: argv0, Err: err}
	}
	return fmt.Errorf("execute %s: %w", path, err)
}

// privateMounts sets up the calling thread's mount namespace, which must
// be its own already, for a command of namespace name: / becomes a slave
// mount (nothing done here reaches the host), each directory of
// names.Hidden() is covered by an empty read-only tmpfs (hideResolverIPC),
// and every file in /etc/netns/<name>/ is bind-mounted over /etc/<file>,
// so the command sees the namespace's resolv.conf and nsswitch.conf,
// never the host's.
func privateMounts(name string) error {
	if err := unix.Mount("", "/", "none", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	// glibc asks nscd before NSS, and resolved answers over varlink and
	// D-Bus: hide all three, as the systemd drop-in does, or a lookup is
	// resolved on the host, outside the tunnel.
	if err := hideResolverIPC(name); err != nil {
		return err
	}
	etc := names.ResolverDir(name)
	ents, _ := os.ReadDir(etc)
	for _, e := range ents {
		src, dst := filepath.Join(etc, e.Name()), filepath.Join("/etc", e.Name())
		if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", src, dst, err)
		}
	}
	return nil
}

// mountSys replaces /sys with a sysfs of the caller's network namespace
// (best effort, as ip netns exec: a command that reads no /sys is no
// worse off).
func mountSys(name string) {
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err == nil {
		unix.Mount(name, "/sys", "sysfs", 0, "")
	}
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// hideResolverIPC covers each directory of names.Hidden() with an empty
// read-only tmpfs, as the drop-in's TemporaryFileSystem= does: whole
// directories, never the socket files in them, which a daemon's restart
// replaces (unlinking a mountpoint detaches the mount in every other mount
// namespace, so a long-running command would lose the mask). An absent
// directory is created first (on the host's /run, as systemd does), so a
// daemon that starts later binds its socket under the mask. Inside
// resolved's directory, where /etc/resolv.conf may link, namespace name's
// resolv.conf is bound at each of names.ResolvedResolvConfs.
func hideResolverIPC(name string) error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, p := range names.Hidden() {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", flags, "mode=0755"); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
		if p == names.ResolvedDir {
			src := names.ResolvConf(name)
			for _, f := range names.ResolvedResolvConfs {
				dst := filepath.Join(p, f)
				if err := os.WriteFile(dst, nil, 0o644); err != nil {
					return fmt.Errorf("hide %s: %w", p, err)
				}
				if _, err := os.Stat(src); err != nil {
					continue // no resolv.conf of the namespace: an empty one
				}
				if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
					return fmt.Errorf("bind %s over %s: %w", src, dst, err)
				}
			}
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "mode=0755"); err != nil {
			return fmt.Errorf("hide %s: remount read-only: %w", p, err)
		}
	}
	return nil
}
