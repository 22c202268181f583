package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxFileSize bounds every file the agent reads: a config or a wg-quick
// file is a few KiB.
const maxFileSize = 1 << 20

// fileRule says what a file the agent reads must satisfy besides being a
// regular file owned by root (or the agent's own user).
type fileRule struct {
	field   string                                         // the field naming the file, for errors
	deny    os.FileMode                                    // permission bits that must be clear
	what    string                                         // "readable or writable" / "writable", for errors
	anyUser bool                                           // owner not checked: build-time validation, which runs unprivileged and changes nothing
	seen    func(path string, secret bool, st os.FileInfo) // Options.Seen
}

// secretDeny is what a secret file's mode must not allow: group and
// others, anything.
const secretDeny os.FileMode = 0o077

var (
	secretRule = func(field string) fileRule {
		return fileRule{field: field, deny: secretDeny, what: "readable or writable"}
	}
	configRule = fileRule{field: "--config", deny: 0o022, what: "writable"}
)

// readTrusted reads path for the agent, which runs as root: a file someone
// else could have written or swapped would hand them the tunnel. Every
// symbolic link on the way must belong to root (or the agent's user), as
// sops-nix's and agenix's do; the file is then opened without following a
// link, and its owner, mode, type and size are checked on the open
// descriptor, not on the path. Errors name the path, never the content.
func readTrusted(path string, r fileRule) ([]byte, error) {
	f, st, err := openTrusted(path, r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if r.seen != nil {
		r.seen(path, r.deny == secretDeny, st)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fieldErr(r.field, "make it readable by the agent (root)", "cannot read %s: %v", path, unwrapPathErr(err))
	}
	if len(data) > maxFileSize {
		return nil, fieldErr(r.field, "check the path: this is no config or wg-quick file", "%s is larger than 1 MiB", path)
	}
	return data, nil
}

// StatTrusted checks the file at path as the agent reads it (a secret
// file's rule, or a config file's), without reading it, and returns what
// fstat says of the open file: the identity Options.Seen reported when it
// was read. Status compares the two to know a file unchanged.
func StatTrusted(path string, secret bool) (os.FileInfo, error) {
	r := configRule
	if secret {
		r = secretRule("file")
	}
	f, st, err := openTrusted(path, r)
	if err != nil {
		return nil, err
	}
	f.Close()
	return st, nil
}

// openTrusted is readTrusted up to the read: the open file and its fstat.
func openTrusted(path string, r fileRule) (*os.File, os.FileInfo, error) {
	real, err := resolveTrusted(path, r)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fieldErr(r.field, "create the file or fix the path", "cannot open %s: %v", path, unwrapPathErr(err))
	}
	st, err := checkTrusted(f, path, r)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// checkTrusted checks the open file f (at path) against r.
func checkTrusted(f *os.File, path string, r fileRule) (os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fieldErr(r.field, "", "stat %s: %v", path, unwrapPathErr(err))
	}
	if st.IsDir() {
		return nil, fieldErr(r.field, "give the path of a file, not a directory", "%s is a directory", path)
	}
	if !st.Mode().IsRegular() {
		return nil, fieldErr(r.field, "point at a regular file", "%s is not a regular file", path)
	}
	if err := r.checkOwner(path, st, "file"); err != nil {
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&r.deny != 0 {
		return nil, fieldErr(r.field, fmt.Sprintf("run chmod %s %s", fixMode(perm, r.deny), path), "%s is %s by group or others (mode %04o)", path, r.what, perm)
	}
	if st.Size() > maxFileSize {
		return nil, fieldErr(r.field, "check the path: this is no config or wg-quick file", "%s is larger than 1 MiB", path)
	}
	return st, nil
}

// resolveTrusted follows path's symbolic links one component at a time
// and refuses a link that is not root's (or the agent user's).
func resolveTrusted(path string, r fileRule) (string, error) { return walkTrusted(path, r, false) }

// CheckSocketDir checks the directory dir a unix socket the agent (root)
// creates goes in, for field: every component that exists, from / down,
// each symbolic link on the way and what it points at, must be a
// directory owned by root (or the agent's user) and not writable by
// group or others. A sticky world-writable directory such as /tmp is
// refused too: whoever may create names in a directory on the path may
// swap what the agent binds, removes or acts on there. The components
// that do not exist yet are the agent's to create (root's, 0755).
func CheckSocketDir(field, dir string) error {
	_, err := walkTrusted(dir, fileRule{field: field, deny: 0o022, what: "writable"}, true)
	return err
}

// walkTrusted is resolveTrusted; with dirs, every directory on the way
// is checked as CheckSocketDir says, and a missing component ends the
// walk without an error (the rest is returned unresolved).
func walkTrusted(path string, r fileRule, dirs bool) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fieldErr(r.field, "", "%s: %v", path, err)
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(abs), "/"), "/")
	done := "/"
	for hops := 0; len(rest) > 0; {
		next := filepath.Join(done, rest[0])
		rest = rest[1:]
		st, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				if dirs {
					return filepath.Join(append([]string{next}, rest...)...), nil
				}
				return "", fieldErr(r.field, "create the file or fix the path", "%s does not exist", path)
			}
			return "", fieldErr(r.field, "make it readable by the agent (root)", "cannot read %s: %v", path, unwrapPathErr(err))
		}
		if st.Mode()&os.ModeSymlink == 0 {
			if dirs {
				if err := r.checkDir(next, st); err != nil {
					return "", err
				}
			}
			done = next
			continue
		}
		if hops++; hops > 40 {
			return "", fieldErr(r.field, "fix the symbolic links", "%s: too many levels of symbolic links", path)
		}
		if err := r.checkOwner(next, st, "symbolic link"); err != nil {
			return "", err
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fieldErr(r.field, "", "read link %s: %v", next, unwrapPathErr(err))
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(done, target)
		}
		t := strings.Split(strings.TrimPrefix(filepath.Clean(target), "/"), "/")
		rest, done = append(t, rest...), "/"
	}
	return done, nil
}

// checkOwner requires root, or the user the agent runs as, as owner.
func (r fileRule) checkOwner(path string, st os.FileInfo, what string) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || r.anyUser {
		return nil
	}
	if uid := int(sys.Uid); uid != 0 && uid != os.Geteuid() {
		return fieldErr(r.field, fmt.Sprintf("run chown root %s (only root may control what the agent reads)", path), "%s %s is owned by uid %d, not root", what, path, uid)
	}
	return nil
}

// checkDir requires a directory owned by root (or the agent's user)
// without r.deny's permission bits: one only root may change.
func (r fileRule) checkDir(path string, st os.FileInfo) error {
	const elsewhere = "or choose a path in a directory only root may change, such as /run/vpn-confinement"
	if !st.IsDir() {
		return fieldErr(r.field, "fix the path", "%s is not a directory", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fieldErr(r.field, fmt.Sprintf("run chown root %s, %s", path, elsewhere), "directory %s is owned by uid %d, not root: its owner could swap the socket's path", path, sys.Uid)
	}
	if perm := st.Mode().Perm(); perm&r.deny != 0 {
		return fieldErr(r.field, fmt.Sprintf("run chmod %s %s, %s", fixMode(perm, r.deny), path, elsewhere), "directory %s is %s by group or others (mode %04o): they could swap the socket's path", path, r.what, st.Mode().Perm()|sticky(st))
	}
	return nil
}

// sticky is st's sticky bit as a chmod digit (01000), for messages.
func sticky(st os.FileInfo) os.FileMode {
	if st.Mode()&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// fixMode is perm without the denied bits, as chmod wants it.
func fixMode(perm, deny os.FileMode) string { return fmt.Sprintf("%o", perm&^deny) }

// readSecret reads a secret file (a wg-quick file or a key); its content
// is never logged or echoed.
func readSecret(field, path string, seen func(string, bool, os.FileInfo)) ([]byte, error) {
	r := secretRule(field)
	r.seen = seen
	return readTrusted(path, r)
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
