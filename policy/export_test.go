package policy

// SetElements is Set.elementStrings for the external tests: the elements
// as Render writes them, which is how nft lists them once Apply loaded
// the set (the kernel tests compare the two).
func SetElements(s *Set) []string { return s.elementStrings() }
