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

// ExecOptions are how Exec runs its command.
type ExecOptions struct {
	// User, if set, runs the command as that user with no capabilities,
	// no_new_privs and only AllowedFamilies' sockets. Without it the
	// command runs as the caller: as root, with every capability, which
	// can leave the namespace (setns) and is no confinement for untrusted
	// code.
	User *Credential
}

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
// namespace, the way `ip netns exec` does: in a private mount namespace,
// every file in /etc/netns/<name>/ is bind-mounted over /etc/<file> (so
// the command sees the namespace's resolv.conf and nsswitch.conf, never
// the host's), each directory of names.Hidden() is covered by an empty
// read-only tmpfs (hideResolverIPC), and /sys is remounted
// to show the namespace's interfaces. The command's exit status is the
// process's (execve). It only returns on error.
func Exec(name string, argv []string, env []string, opts ExecOptions) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command given")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return &ExecError{Code: 127, Cmd: argv[0], Err: err}
		}
		return &ExecError{Code: 126, Cmd: argv[0], Err: unwrapPathErr(err)}
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
	if err := vnetns.Set(ns); err != nil {
		return fmt.Errorf("enter netns %q: %w", name, err)
	}
	ns.Close()
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err == nil {
		unix.Mount(name, "/sys", "sysfs", 0, "")
	}
	if opts.User != nil {
		if err := dropPrivileges(opts.User); err != nil {
			return err
		}
		if err := restrictFamilies(); err != nil {
			return err
		}
	}
	err = unix.Exec(path, argv, env)
	switch err {
	case unix.ENOENT:
		return &ExecError{Code: 127, Cmd: argv[0], Err: err}
	case unix.EACCES, unix.ENOEXEC, unix.EPERM, unix.EISDIR:
		return &ExecError{Code: 126, Cmd: argv[0], Err: err}
	}
	return fmt.Errorf("execute %s: %w", path, err)
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
