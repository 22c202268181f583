package policy

import (
	"errors"
	"fmt"
	"strings"
)

// MaxCommentLen is nft's limit for a rule or set comment.
const MaxCommentLen = 128

// Validate checks that r is something Apply and Render can express
// faithfully: known types, names and comments nft accepts, and references
// only to sets and counters the table defines. Compile's output always
// passes; Apply refuses a Ruleset that does not.
func (r *Ruleset) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if r.Family != FamilyINet {
		bad("family %q: only %q is supported", r.Family, FamilyINet)
	}
	if !validName(r.Name) {
		bad("table name %q is not valid", r.Name)
	}
	counters := map[string]bool{}
	for _, c := range r.Counters {
		if !validName(c.Name) || counters[c.Name] {
			bad("counter %q: invalid or duplicate name", c.Name)
		}
		counters[c.Name] = true
	}
	sets := map[string]SetType{}
	for _, s := range r.Sets {
		if _, dup := sets[s.Name]; !validName(s.Name) || dup {
			bad("set %q: invalid or duplicate name", s.Name)
		}
		sets[s.Name] = s.Type
		if err := s.validate(); err != nil {
			bad("set %q: %w", s.Name, err)
		}
	}
	chains := map[string]bool{} // name -> base chain
	for _, c := range r.Chains {
		if _, dup := chains[c.Name]; !validName(c.Name) || dup {
			bad("chain %q: invalid or duplicate name", c.Name)
		}
		chains[c.Name] = c.Base()
	}
	for _, c := range r.Chains {
		if err := c.validateHeader(); err != nil {
			bad("chain %q: %w", c.Name, err)
		}
		for i, rule := range c.Rules {
			if err := rule.validate(sets, counters, chains); err != nil {
				bad("chain %q rule %d (%s): %w", c.Name, i, rule, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Set) validate() error {
	if err := validComment(s.Comment); err != nil {
		return err
	}
	switch s.Type {
	case SetIPv4Addr, SetIPv6Addr:
		if len(s.Ports) > 0 {
			return errors.New("an address set cannot hold ports")
		}
		var prev string
		for i, p := range s.Addrs {
			switch {
			case !p.IsValid() || p != p.Masked():
				return fmt.Errorf("element %s is not a masked prefix", p)
			case p.Addr().Is6() != (s.Type == SetIPv6Addr) || p.Addr().Is4In6():
				return fmt.Errorf("element %s does not fit %s", p, s.Type)
			case !s.Interval && !p.IsSingleIP():
				return fmt.Errorf("element %s is a prefix; the set needs flags interval", p)
			case i > 0 && comparePrefix(s.Addrs[i-1], p) >= 0:
				return fmt.Errorf("elements must be sorted and unique (%s after %s)", p, prev)
			case s.Interval && i > 0 && s.Addrs[i-1].Overlaps(p):
				return fmt.Errorf("element %s overlaps %s", p, prev)
			}
			prev = p.String()
		}
	case SetInetService:
		if len(s.Addrs) > 0 || s.Interval {
			return errors.New("a port set holds single ports only")
		}
		for i, p := range s.Ports {
			if i > 0 && s.Ports[i-1] >= p {
				return fmt.Errorf("ports must be sorted and unique (%d after %d)", p, s.Ports[i-1])
			}
		}
	default:
		return fmt.Errorf("unknown type %q", s.Type)
	}
	return nil
}

func (c *Chain) validateHeader() error {
	if !c.Base() {
		if c.Type != "" || c.Policy != "" || c.Priority != 0 {
			return errors.New("a regular chain (no hook) has no type, priority or policy")
		}
		return nil
	}
	switch c.Hook {
	case HookPrerouting, HookInput, HookForward, HookOutput, HookPostrouting:
	default:
		return fmt.Errorf("unknown hook %q", c.Hook)
	}
	switch c.Type {
	case ChainFilter:
	case ChainNAT:
		if c.Hook == HookForward {
			return errors.New("nat chains cannot hook forward")
		}
	default:
		return fmt.Errorf("unknown type %q", c.Type)
	}
	if c.Policy != PolicyAccept && c.Policy != PolicyDrop {
		return fmt.Errorf("unknown policy %q", c.Policy)
	}
	return nil
}

func (r *Rule) validate(sets map[string]SetType, counters map[string]bool, chains map[string]bool) error {
	if r.Comment == "" {
		return errors.New("every rule needs a comment saying why it exists")
	}
	if err := validComment(r.Comment); err != nil {
		return err
	}
	if len(r.Exprs) == 0 {
		return errors.New("empty rule")
	}
	var l4 Proto
	for i, e := range r.Exprs {
		if i < len(r.Exprs)-1 {
			switch e.(type) {
			case Verdict, Goto, Reject, DNAT:
				return fmt.Errorf("%s must be last", e)
			}
		}
		switch e := e.(type) {
		case Iface:
			if !validIfname(e.Name) {
				return fmt.Errorf("interface name %q is not valid", e.Name)
			}
		case Addr:
			if e.Set != "" {
				want := SetIPv4Addr
				if e.V6 {
					want = SetIPv6Addr
				}
				if sets[e.Set] != want {
					return fmt.Errorf("%s: no %s set %q", e, want, e.Set)
				}
			} else if !e.IP.IsValid() || e.IP.Is6() != e.V6 || e.IP.Is4In6() {
				return fmt.Errorf("%s: address does not fit", e)
			}
		case Port:
			if e.Proto != TCP && e.Proto != UDP {
				return fmt.Errorf("unknown protocol %q", e.Proto)
			}
			if e.Set != "" && sets[e.Set] != SetInetService {
				return fmt.Errorf("%s: no port set %q", e, e.Set)
			}
			l4 = e.Proto
		case L4Proto:
			if e.Proto != TCP && e.Proto != UDP {
				return fmt.Errorf("unknown protocol %q", e.Proto)
			}
			l4 = e.Proto
		case TCPSyn:
			l4 = TCP
		case ClampMSS:
			if l4 != TCP {
				return errors.New("MSS clamping needs a TCP match first")
			}
		case CounterRef:
			if !counters[e.Name] {
				return fmt.Errorf("no counter %q", e.Name)
			}
		case Reject:
			if e.TCPReset && l4 != TCP {
				return errors.New("a TCP reset needs a TCP match first")
			}
		case DNAT:
			if !e.Addr.Is4() || e.Port == 0 {
				return fmt.Errorf("%s: need an IPv4 address and a port", e)
			}
		case Goto:
			// Only regular chains can be jumped to; nft refuses a base
			// chain, and a goto to a missing chain would fail the load.
			if base, ok := chains[e.Chain]; !ok || base {
				return fmt.Errorf("%s: no regular chain %q in the table", e, e.Chain)
			}
		case Verdict:
			if e != Accept && e != Drop {
				return fmt.Errorf("unknown verdict %q", string(e))
			}
		case SocketCgroup:
			// Level 0 is the root cgroup, and id 1 is the root's id:
			// every socket descends from it, so the match would let
			// anything pass as the agent.
			if e.Level == 0 || e.Level > 255 || e.ID <= 1 {
				return fmt.Errorf("%s: need a level 1-255 and a cgroup other than the root", e)
			}
		case NFProto, CtStateMatch, CtStatusDNAT, CtDirectionReply, FibDaddrLocal, Mark:
		default:
			return fmt.Errorf("unsupported expression %T", e)
		}
	}
	return nil
}

// validName accepts what nft accepts as an unquoted identifier.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

func validIfname(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	return !strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '/' })
}

// validComment keeps comments within what nft stores and quotes verbatim.
func validComment(s string) error {
	if len(s) > MaxCommentLen {
		return fmt.Errorf("comment %q is longer than %d bytes", s, MaxCommentLen)
	}
	if strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c > '~' || c == '"' || c == '\\' }) {
		return fmt.Errorf("comment %q has characters nft cannot quote", s)
	}
	return nil
}
