package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

// cmdPodmanFlags prints the `podman run` flags that confine a container to
// namespace NAME (agent/unit.Podman), one a line, for
// `podman run $(vpn-agent podman-flags NAME) IMAGE`.
func cmdPodmanFlags(args []string, out io.Writer) int {
	fs, _, _ := flags("podman-flags")
	cfg := fs.String("config", "", "config file, whose name must be NAME (optional)")
	why := fs.Bool("why", false, "precede each flag with its reason, as # comment lines")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	name, err := nameArg(fs)
	if err != nil {
		return fail(err)
	}
	if *cfg != "" {
		if _, err := specNamed(*cfg, name); err != nil {
			return fail(err)
		}
	}
	for _, f := range unit.Podman() {
		if *why {
			for _, l := range strings.Split(f.Why, "\n") {
				fmt.Fprintf(out, "# %s\n", l)
			}
		}
		fmt.Fprintln(out, unit.Fill(f.Flag, unit.Vars{"name": name}))
	}
	return ExitOK
}

// specNamed resolves the config at path without touching the host, and
// refuses one whose name is not name.
func specNamed(path, name string) (*config.Spec, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	s, err := config.Resolve(c, config.Options{Static: true})
	if err != nil {
		return nil, err
	}
	if s.Name != name {
		return nil, &config.FieldError{Field: "NAME", Msg: fmt.Sprintf("%q does not match the config's name %q", name, s.Name), Fix: "use the config's name"}
	}
	return s, nil
}
