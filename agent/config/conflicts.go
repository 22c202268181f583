package config

import (
	"fmt"
	"net/netip"
	"sort"
)

// Conflict is a clash between two namespaces' configs that each pass on
// their own: they share something of the host's (a name, an interface, a
// host port, a host-link subnet).
type Conflict struct {
	A, B  string // the two files (or namespace names)
	Field string // the field to change, in either file
	Msg   string
	Fix   string
}

// FieldError is c as bad input: "A and B: field: msg; fix".
func (c Conflict) FieldError() *FieldError {
	return &FieldError{Field: c.A + " and " + c.B + ": " + c.Field, Msg: c.Msg, Fix: c.Fix}
}

func (c Conflict) Error() string { return c.FieldError().Error() }

// claim is one use of a host resource by config i.
type claim struct {
	i     int
	field string
}

// Conflicts returns every conflict between specs, which were resolved from
// files (files[i] names specs[i] in the messages; without it, the
// namespace's name does). Conflicts within one config are Resolve's.
// Pairs that share their name report only that: everything derived from
// the name clashes with it.
func Conflicts(specs []*Spec, files []string) []Conflict {
	label := func(i int) string {
		if i < len(files) && files[i] != "" {
			return files[i]
		}
		return specs[i].Name
	}
	var out []Conflict
	add := func(a, b claim, msg, fix string) {
		field := a.field
		if b.field != a.field {
			field = a.field + " / " + b.field
		}
		out = append(out, Conflict{A: label(a.i), B: label(b.i), Field: field, Msg: msg, Fix: fix})
	}
	sameName := func(a, b int) bool { return specs[a].Name == specs[b].Name }
	byName := map[string]int{}
	for i, s := range specs {
		if j, ok := byName[s.Name]; ok {
			add(claim{j, "name"}, claim{i, "name"}, fmt.Sprintf("both configure namespace %q", s.Name), "give each namespace its own name (one config per namespace)")
			continue
		}
		byName[s.Name] = i
	}
	// clash reports the first earlier claim of key by another config.
	seen := map[string][]claim{}
	clash := func(key string, c claim, msg, fix string) {
		for _, prev := range seen[key] {
			if !sameName(prev.i, c.i) {
				add(prev, c, msg, fix)
				break
			}
		}
		seen[key] = append(seen[key], c)
	}
	// Interface names in the host: WireGuard interfaces and host-link veths.
	// Two veths clash only when the names do (reported above), so a veth
	// clash pairs an interface with another namespace's veth.
	ifs := map[string][]claim{}
	var order []string
	for i, s := range specs {
		ns := []string{s.Interface}
		if s.HostLink != nil {
			ns = append(ns, s.HostLink.HostIf, s.HostLink.NSIf)
		}
		for k, n := range ns {
			field := "interface"
			if k > 0 {
				field = "hostLink"
			}
			if len(ifs[n]) == 0 {
				order = append(order, n)
			}
			ifs[n] = append(ifs[n], claim{i, field})
		}
	}
	for _, n := range order {
		cs := ifs[n]
		sort.SliceStable(cs, func(x, y int) bool { return cs[x].field == "interface" && cs[y].field != "interface" })
	pairs:
		for x, a := range cs {
			for _, b := range cs[x+1:] {
				if sameName(a.i, b.i) {
					continue
				}
				if b.field == "interface" {
					add(a, b, fmt.Sprintf("both use the interface name %q", n), `set distinct "interface" names (or leave them unset)`)
				} else {
					add(a, b, fmt.Sprintf("the interface name %q is the other's host-link veth", n), `rename the "interface"`)
				}
				break pairs
			}
		}
	}
	for i, s := range specs {
		if s.Metrics != nil {
			clash("metrics/"+s.Metrics.String(), claim{i, "metrics.listen"},
				fmt.Sprintf("both serve metrics on %s", s.Metrics), "give each namespace its own metrics.listen address")
		}
		if s.ListenPort != 0 {
			clash(fmt.Sprintf("port/udp/%d", s.ListenPort), claim{i, "wireguard.listenPort"},
				fmt.Sprintf("both use host port udp/%d", s.ListenPort), "use each host port in one namespace only")
		}
		if s.HostLink == nil {
			continue
		}
		for _, m := range s.HostLink.Mappings {
			key := fmt.Sprintf("%s/%d", m.Proto, m.HostPort)
			clash("port/"+key, claim{i, "hostLink.portMappings"},
				fmt.Sprintf("both use host port %s", key), "map each host port in one namespace only")
		}
	}
	type subnet struct {
		i int
		p netip.Prefix
	}
	var subnets []subnet
	for i, s := range specs {
		if s.HostLink != nil {
			subnets = append(subnets, subnet{i, s.HostLink.HostAddr.Masked()})
		}
	}
	for x, a := range subnets {
		for _, b := range subnets[x+1:] {
			if a.p.Overlaps(b.p) && !sameName(a.i, b.i) {
				add(claim{a.i, "hostLink.hostAddress"}, claim{b.i, "hostLink.hostAddress"},
					fmt.Sprintf("host-link subnets %s and %s overlap", a.p, b.p),
					"give each namespace its own subnet, e.g. 10.200.N.1/30 and 10.200.N.2/30 with a different N per namespace")
			}
		}
	}
	return out
}
