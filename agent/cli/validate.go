package cli

import (
	"fmt"
	"io"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

func cmdValidate(args []string, out io.Writer) int {
	fs, _, _ := flags("validate")
	cfg := fs.String("config", "", "config file (JSON)")
	static := fs.Bool("static", false, "do not read referenced files (wg-quick file, keys): for build-time checks")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	s, err := loadSpec(*cfg, *static)
	if err != nil {
		return fail(err)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	what := "tunnel from the wg-quick file"
	if len(s.Addresses) > 0 || !*static {
		what = fmt.Sprintf("%d address(es), %d peer(s), %d resolver(s), IPv6 %s", len(s.Addresses), len(s.Peers), len(s.DNS), map[bool]string{true: "tunnelled", false: "blocked"}[s.IPv6])
	}
	fmt.Fprintf(out, "config OK: namespace %s, interface %s, backend %s, %s\n", s.Name, s.Interface, s.Backend, what)
	return ExitOK
}

func cmdPolicy(args []string, out io.Writer) int {
	fs, _, _ := flags("policy")
	cfg := fs.String("config", "", "config file (JSON)")
	host := fs.Bool("host", false, "print the host-side table (host link) instead")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	s, err := loadSpec(*cfg, false)
	if err != nil {
		return fail(err)
	}
	rs := policy.Compile(s)
	if *host {
		if rs = policy.CompileHost(s); rs == nil {
			fmt.Fprintln(out, "# no host link configured: no host-side table")
			return ExitOK
		}
	}
	fmt.Fprint(out, rs.Render())
	return ExitOK
}
