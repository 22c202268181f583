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
	restart := fs.String("restart-with-agent", "", "instead, print the agent-side drop-in (Wants=) that starts these (comma-separated) long-running services with the agent, also after its automatic restart")
	socket := fs.Bool("socket", false, "instead, print the drop-in for a socket unit: its listening sockets are created in the namespace (confine the service it activates with the plain drop-in)")
	container := fs.Bool("container", false, "instead, print the drop-in for the unit that runs a podman container confined by vpn-agent podman-flags NAME (its dependencies on the agent only)")
	upholds := fs.String("upholds", "", "deprecated name of --restart-with-agent (prints Wants=, no longer Upholds=)")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	name, err := nameArg(fs)
	if err != nil {
		return fail(err)
	}
	iface, nsVeth := names.Tunnel(name), ""
	if *cfg != "" {
		s, err := specNamed(*cfg, name)
		if err != nil {
			return fail(err)
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
	flag := "--restart-with-agent"
	if *restart == "" && *upholds != "" {
		*restart, flag = *upholds, "--upholds"
	}
	if *restart != "" && *socket {
		return fail(&config.FieldError{Field: "--socket", Msg: "cannot be combined with " + flag, Fix: "print the socket's drop-in and the agent's in two runs"})
	}
	if *container && (*restart != "" || *socket) {
		other := flag
		if *socket {
			other = "--socket"
		}
		return fail(&config.FieldError{Field: "--container", Msg: "cannot be combined with " + other, Fix: "print each drop-in in a run of its own"})
	}
	if *restart != "" {
		services := strings.Split(*restart, ",")
		for _, s := range services {
			if err := unit.CheckName(s); err != nil {
				return fail(&config.FieldError{Field: flag, Msg: err.Error(), Fix: "list long-running services as a,b.service, e.g. " + flag + " transmission.service (no templates, oneshots, socket- or timer-activated units)"})
			}
		}
		fmt.Fprint(out, unit.RestartWithAgentDropIn(*agentUnit, services))
		return ExitOK
	}
	if *socket {
		fmt.Fprint(out, unit.SocketDropIn(name, *agentUnit))
		return ExitOK
	}
	if *container {
		fmt.Fprint(out, unit.ContainerDropIn(name, *agentUnit))
		return ExitOK
	}
	fmt.Fprint(out, unit.DropIn(name, iface, nsVeth, *agentUnit))
	return ExitOK
}
