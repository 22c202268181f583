package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// confinedPath is the PATH of a command run with --user.
const confinedPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func cmdExec(args []string, out io.Writer) int {
	fs, _, _ := flags("exec")
	as := fs.String("user", "", "run as USER[:GROUP], confined: without capabilities, with no_new_privs, only IP, unix and netlink sockets, "+
		"no ptrace, pidfd_getfd or io_uring, in its own PID namespace (it sees only its own processes) and in a new session "+
		"without the caller's controlling terminal (stdin, stdout and stderr stay the caller's), "+
		"with a clean environment: PATH, HOME, USER, LOGNAME, TERM and what --env names; "+
		"exec stays its parent, passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on and exits with its status (128+N: killed by signal N) "+
		"(default: as the caller, with the caller's environment; as root that is no confinement for untrusted code)")
	var envs []string
	fs.Func("env", "NAME or NAME=VALUE: give the command this variable (NAME: the caller's value); repeatable", func(v string) error {
		n, _, _ := strings.Cut(v, "=")
		if n == "" || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%q is not NAME or NAME=VALUE", v)
		}
		envs = append(envs, v)
		return nil
	})
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
	var c *netns.Credential
	env := os.Environ()
	if *as != "" {
		var u *user.User
		var err error
		if c, u, err = credential(*as); err != nil {
			return fail(err)
		}
		env = confinedEnv(u)
	}
	env = withEnv(env, envs)
	if !netns.Exists(name) {
		return fail(&config.FieldError{Field: "NAME", Msg: fmt.Sprintf("namespace %s is not up", name), Fix: "bring it up first: vpn-agent up --config FILE"})
	}
	var err error
	if c != nil {
		var rc int
		if rc, err = netns.ExecAs(name, cmd, env, c); err == nil {
			return rc
		}
	} else {
		err = netns.Exec(name, cmd, env)
	}
	var ee *netns.ExecError
	if errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "vpn-agent: exec: %v\n", ee)
		return ee.Code
	}
	return fail(fmt.Errorf("exec: %w", err))
}

// confinedEnv is the environment of a command run as u: a standard PATH,
// u's HOME (/ without one), USER and LOGNAME, and the caller's TERM.
func confinedEnv(u *user.User) []string {
	home := u.HomeDir
	if home == "" {
		home = "/"
	}
	env := []string{"PATH=" + confinedPath, "HOME=" + home, "USER=" + u.Username, "LOGNAME=" + u.Username}
	if t, ok := os.LookupEnv("TERM"); ok {
		env = append(env, "TERM="+t)
	}
	return env
}

// withEnv is env with each of add set: NAME=VALUE as given, NAME to the
// caller's value (left out when the caller has none).
func withEnv(env, add []string) []string {
	for _, a := range add {
		n, v, ok := strings.Cut(a, "=")
		if !ok {
			if v, ok = os.LookupEnv(n); !ok {
				continue
			}
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, n+"=") })
		env = append(env, n+"="+v)
	}
	return env
}

// credential resolves USER[:GROUP] (names or numbers) on the host: the
// credential, and the user's passwd entry (a bare uid without one has
// only Uid, Gid and Username, the number).
func credential(spec string) (*netns.Credential, *user.User, error) {
	bad := func(format string, a ...any) error {
		return &config.FieldError{Field: "--user", Msg: fmt.Sprintf(format, a...), Fix: "give an existing user, and optionally group, e.g. --user nobody or --user media:media"}
	}
	uname, gname, _ := strings.Cut(spec, ":")
	u, err := config.LookupUser(uname)
	if err != nil {
		return nil, nil, bad("no user %q on this host", uname)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, nil, bad("user %q has a non-numeric id", uname)
	}
	if gname != "" {
		g, err := lookupGroup(gname)
		if err != nil {
			return nil, nil, bad("no group %q on this host", gname)
		}
		if gid, err = strconv.ParseUint(g.Gid, 10, 32); err != nil {
			return nil, nil, bad("group %q has a non-numeric id", gname)
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
	return c, u, nil
}

func lookupGroup(s string) (*user.Group, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		return &user.Group{Gid: s, Name: s}, nil
	}
	return user.LookupGroup(s)
}
