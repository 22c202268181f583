package policy

import "github.com/vpn-confinement/vpn-confinement/agent/config"

// SetElements is Set.elementStrings for the external tests: the elements
// as Render writes them, which is how nft lists them once Apply loaded
// the set (the kernel tests compare the two).
func SetElements(s *Set) []string { return s.elementStrings() }

// CompileWithoutHostLinkMark is Compile with the host link's established
// rule as it was before HostLinkCtMark: the positive control of the tests
// that show a tunnel flow cannot leave by the host link.
func CompileWithoutHostLinkMark(s *config.Spec) *Ruleset { return compile(s, false) }
