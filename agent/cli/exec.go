package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

func cmdExec(args []string, out io.Writer) int {
	fs, _, _ := flags("exec")
	as := fs.String("user", "", "run as USER[:GROUP], without capabilities, with no_new_privs and only IP, unix and netlink sockets (default: as the caller; as root that is no confinement for untrusted code)")
	i := indexOf(args, "--")
	if i < 0 {
		if rc := parse(fs, args); rc >= 0 { // --help, or a bad flag
			return rc
		}
		return fail(&config.FieldError{Field: "exec", Msg: "expected NAME -- CMD [ARG...]", Fix: "e.g. vpn-agent exec proton -- curl https://example.com"})
	}
	if rc := parse(fs, args[:i]); rc >= 0 {
		return rc
	}
	if rc := needRoot("exec", "it enters the namespace"); rc >= 0 {
		return rc
	}
	cmd := args[i+1:]
	if fs.NArg() != 1 || len(cmd) == 0 {
		return fail(&config.FieldError{Field: "exec", Msg: "expected NAME -- CMD [ARG...]", Fix: "e.g. vpn-agent exec proton -- curl https://example.com"})
	}
	name := fs.Arg(0)
	if err := config.ValidateName(name); err != nil {
		return fail(err)
	}
	var opts netns.ExecOptions
	if *as != "" {
		c, err := credential(*as)
		if err != nil {
			return fail(err)
		}
		opts.User = c
	}
	if !netns.Exists(name) {
		return fail(&config.FieldError{Field: "NAME", Msg: fmt.Sprintf("namespace %s is not up", name), Fix: "bring it up first: vpn-agent up --config FILE"})
	}
	err := netns.Exec(name, cmd, os.Environ(), opts)
	var ee *netns.ExecError
	if errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "vpn-agent: exec: %v\n", ee)
		return ee.Code
	}
	return fail(fmt.Errorf("exec: %w", err))
}

// credential resolves USER[:GROUP] (names or numbers) on the host.
func credential(spec string) (*netns.Credential, error) {
	bad := func(format string, a ...any) error {
		return &config.FieldError{Field: "--user", Msg: fmt.Sprintf(format, a...), Fix: "give an existing user, and optionally group, e.g. --user nobody or --user media:media"}
	}
	uname, gname, _ := strings.Cut(spec, ":")
	u, err := lookupUser(uname)
	if err != nil {
		return nil, bad("no user %q on this host", uname)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, bad("user %q has a non-numeric id", uname)
	}
	if gname != "" {
		g, err := lookupGroup(gname)
		if err != nil {
			return nil, bad("no group %q on this host", gname)
		}
		if gid, err = strconv.ParseUint(g.Gid, 10, 32); err != nil {
			return nil, bad("group %q has a non-numeric id", gname)
		}
	}
	c := &netns.Credential{UID: uint32(uid), GID: uint32(gid), Groups: []uint32{uint32(gid)}}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if n, err := strconv.ParseUint(s, 10, 32); err == nil && uint32(n) != c.GID {
				c.Groups = append(c.Groups, uint32(n))
			}
		}
	}
	return c, nil
}

func lookupUser(s string) (*user.User, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		if u, err := user.LookupId(s); err == nil {
			return u, nil
		}
		return &user.User{Uid: s, Gid: s, Username: s}, nil // a bare uid, as setpriv allows
	}
	return user.Lookup(s)
}

func lookupGroup(s string) (*user.Group, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		return &user.Group{Gid: s, Name: s}, nil
	}
	return user.LookupGroup(s)
}
