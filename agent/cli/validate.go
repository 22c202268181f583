package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// configList is a repeatable --config flag.
type configList []string

func (l *configList) String() string     { return strings.Join(*l, ",") }
func (l *configList) Set(v string) error { *l = append(*l, v); return nil }

// cmdValidate checks one config, or several together (--config repeated):
// each on its own, then the conflicts between them, one line each.
func cmdValidate(args []string, out io.Writer) int {
	fs, _, _ := flags("validate")
	var cfgs configList
	fs.Var(&cfgs, "config", "config file (JSON); repeat to check several namespaces together for conflicts")
	static := fs.Bool("static", false, "do not read referenced files (wg-quick file, keys) or check this host (endpoint names resolve, kernel backend available, interface name and listen port free): for build-time checks")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if len(cfgs) <= 1 {
		s, err := loadSpec(strings.Join(cfgs, ""), *static)
		if err != nil {
			return fail(err)
		}
		if !*static {
			if err := preflight(newEngine(newLogger("warn", "text")), s); err != nil {
				return fail(err)
			}
		}
		reportOK(out, s, *static)
		return ExitOK
	}
	var specs []*config.Spec
	var files []string
	rc := ExitOK
	for _, f := range cfgs {
		s, err := loadSpec(f, *static)
		if err != nil {
			rc = max(rc, fail(fmt.Errorf("%s: %w", f, err)))
			continue
		}
		if !*static {
			if err := preflight(newEngine(newLogger("warn", "text")), s); err != nil {
				rc = max(rc, fail(fmt.Errorf("%s: %w", f, err)))
				continue
			}
		}
		specs, files = append(specs, s), append(files, f)
	}
	for _, c := range config.Conflicts(specs, files) {
		rc = max(rc, fail(c.FieldError()))
	}
	if rc != ExitOK {
		return rc
	}
	for _, s := range specs {
		reportOK(out, s, *static)
	}
	fmt.Fprintf(out, "%d configs OK together: no name, interface, host port or host-link subnet is used twice\n", len(specs))
	return ExitOK
}

func reportOK(out io.Writer, s *config.Spec, static bool) {
	for _, w := range s.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	if w := s.Metrics.Exposed(); w != "" {
		fmt.Fprintf(os.Stderr, "vpn-agent: warning: %s\n", w)
	}
	what := "tunnel from the wg-quick file"
	if len(s.Addresses) > 0 || !static {
		what = fmt.Sprintf("%d address(es), %d peer(s), %d resolver(s), IPv6 %s", len(s.Addresses), len(s.Peers), len(s.DNS), map[bool]string{true: "tunnelled", false: "blocked"}[s.IPv6])
	}
	fmt.Fprintf(out, "config OK: namespace %s, interface %s, backend %s, %s\n", s.Name, s.Interface, s.Backend, what)
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
