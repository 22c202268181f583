package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

func sortedStrings(s []string) []string { sort.Strings(s); return s }

func cmdUnit(args []string, out io.Writer) int {
	fs, _, _ := flags("unit")
	cfg := fs.String("config", "", "config file, to take interface names from (optional)")
	agentUnit := fs.String("agent-unit", "", "the agent's unit (default vpn-agent@NAME.service)")
	upholds := fs.String("upholds", "", "instead, print the agent-side drop-in that keeps these (comma-separated) services running")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	name, err := nameArg(fs)
	if err != nil {
		return fail(err)
	}
	iface, nsVeth := names.Tunnel(name), ""
	if *cfg != "" {
		c, err := config.Load(*cfg)
		if err != nil {
			return fail(err)
		}
		s, err := config.Resolve(c, config.Options{Static: true})
		if err != nil {
			return fail(err)
		}
		if s.Name != name {
			return fail(&config.FieldError{Field: "NAME", Msg: fmt.Sprintf("%q does not match the config's name %q", name, s.Name), Fix: "use the config's name"})
		}
		iface = s.Interface
		if s.HostLink != nil {
			nsVeth = s.HostLink.NSIf
		}
	}
	if *agentUnit == "" {
		*agentUnit = names.AgentUnit(name)
	} else if err := unit.CheckName(*agentUnit); err != nil {
		return fail(&config.FieldError{Field: "--agent-unit", Msg: err.Error(), Fix: "e.g. --agent-unit vpn-agent@" + name + ".service"})
	}
	if *upholds != "" {
		services := strings.Split(*upholds, ",")
		for _, s := range services {
			if err := unit.CheckName(s); err != nil {
				return fail(&config.FieldError{Field: "--upholds", Msg: err.Error(), Fix: "list services as a,b.service, e.g. --upholds transmission.service"})
			}
		}
		fmt.Fprint(out, unit.UpholdDropIn(*agentUnit, services))
		return ExitOK
	}
	fmt.Fprint(out, unit.DropIn(name, iface, nsVeth, *agentUnit))
	return ExitOK
}
