package health

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Issue 20 finding 6: with no file descriptor left (EMFILE, as a flood
// of connections caused), the kill switch cannot be read; the report
// says so, and does not claim the loaded table is missing. Positive
// control: with descriptors, the same namespace's table reads as
// loaded, and once deleted as NOT loaded.
// Not parallel: it lowers the test process's descriptor limit.
func TestInspectPolicyUnreadableIsNotMissing(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces, nftables")
	id, s := testNamespace(t, "hu")
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	inspect := func() *Report {
		r := &Report{Name: id}
		inspectPolicy(r, s, Target{}.want, policy.Forwarded{}, nil, nil, true)
		return r
	}
	if r := inspect(); !r.Healthy() || !r.Policy.Loaded {
		t.Fatalf("control: the loaded table reads %+v %q", r.Policy, r.Strings())
	}

	// No descriptor left: the soft limit just above the highest open
	// one, and every free number below it taken.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range fds {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, n)
		}
	}
	low := old
	low.Cur = uint64(highest + 1)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var held []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	r := inspect()
	for _, fd := range held {
		syscall.Close(fd)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !r.Has(PolicyUnreadable) || r.Has(PolicyMissing) || !strings.Contains(strings.Join(r.Strings(), "\n"), "too many open files") {
		t.Errorf("with no descriptor left: %q, want only that the table cannot be checked (too many open files)", r.Strings())
	}

	// Control: deleted, it is NOT loaded (and that is not "unreadable").
	if err := policy.Remove(names.Netns(id), names.Table); err != nil {
		t.Fatal(err)
	}
	if r := inspect(); !r.Has(PolicyMissing) || r.Has(PolicyUnreadable) {
		t.Errorf("deleted table: %q, want NOT loaded", r.Strings())
	}
}
