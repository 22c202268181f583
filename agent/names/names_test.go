package names

import (
	"strings"
	"testing"
)

// The longest valid namespace name still gives interface names the kernel
// accepts (IFNAMSIZ-1 = 15 bytes).
func TestDerivedInterfaceNamesFitIFNAMSIZ(t *testing.T) {
	ns := strings.Repeat("a", MaxNameLen)
	for _, n := range []string{Tunnel(ns), HostVeth(ns), NSVeth(ns)} {
		if len(n) > 15 {
			t.Errorf("%q is %d bytes, over IFNAMSIZ-1", n, len(n))
		}
	}
	if MaxNameLen+1+len(Tunnel("")) <= 15 {
		t.Errorf("MaxNameLen %d is shorter than the interface limit allows", MaxNameLen)
	}
}
