package engine

import (
	"fmt"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// Ownership. The agent marks what it makes: names.OwnerFile(ns) is
// written before anything else of ns exists and removed last, and every
// link it creates on the host carries names.LinkAlias(ns). It adopts and
// deletes only what is marked, so a namespace or veth someone made by hand
// under a derived name is never taken over or deleted by accident; --adopt
// (Engine.Adopt) takes it over on purpose.

// NotOwnedError says an object of a namespace's name exists that vpn-agent
// did not create: bad input (exit 2), nothing changed.
type NotOwnedError struct {
	Object  string // "namespace x", "link vh-x on the host"
	Replace string // what --adopt does to it
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s exists and was not created by vpn-agent; pass --adopt to take it over (%s)", e.Object, e.Replace)
}

// NotUpError says down found nothing of the namespace that vpn-agent made
// (bad input, exit 2; down --force accepts it). Left lists objects of the
// name it did not make and so left alone.
type NotUpError struct {
	Name string
	Left []string
}

func (e *NotUpError) Error() string {
	if len(e.Left) == 0 {
		return fmt.Sprintf("namespace %s is not up (nothing of it exists); down --force accepts that", e.Name)
	}
	return fmt.Sprintf("namespace %s is not up (vpn-agent made nothing of it); left %s alone: not created by vpn-agent (take over with up --adopt, or delete by hand)", e.Name, strings.Join(e.Left, ", "))
}

// hostLinkNames are the host-side links the agent makes (and down
// deletes) for namespace name: the veth, and the tunnel between its
// creation and its move into the namespace.
func hostLinkNames(name string, s *config.Spec) []string {
	out := []string{names.HostVeth(name), names.Tunnel(name)}
	if s != nil && s.HostLink != nil && s.HostLink.HostIf != names.HostVeth(name) {
		out = append(out, s.HostLink.HostIf)
	}
	return out
}

// foreignHostLinks lists the links of hostLinkNames that exist on the
// host without the agent's alias.
func foreignHostLinks(sys system, name string, s *config.Spec) []string {
	var out []string
	for _, l := range hostLinkNames(name, s) {
		if ok, alias := sys.links.HostLinkAlias(l); ok && alias != names.LinkAlias(name) {
			out = append(out, l)
		}
	}
	return out
}

// CheckOwnership returns a *NotOwnedError if Up of s would take over a
// namespace or host link that vpn-agent did not create and e.Adopt is not
// set. It changes nothing.
func (e *Engine) CheckOwnership(s *config.Spec) error {
	return e.checkOwnership(e.sys(), s)
}

func (e *Engine) checkOwnership(sys system, s *config.Spec) error {
	if e.Adopt {
		return nil
	}
	if !sys.files.Owned(s.Name) && sys.ns.Exists(s.Name) {
		return &NotOwnedError{Object: "namespace " + s.Name, Replace: "its routes, addresses and firewall are replaced"}
	}
	if l := foreignHostLinks(sys, s.Name, s); len(l) > 0 {
		return &NotOwnedError{Object: "link " + l[0] + " on the host", Replace: "it is deleted and recreated"}
	}
	return nil
}
