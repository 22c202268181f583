// Command sandboxprobe tries one thing a confined process must not be able
// to do, and says whether it could. The tests run it confined (vpn-agent
// exec --user, a confined systemd service) and, as the positive control,
// unconfined, where the same attempt must succeed: a probe that cannot
// succeed anywhere proves nothing.
//
// Usage: sandboxprobe CHECK [ARG...]. It prints one line, "CHECK ok ..."
// or "CHECK refused: ...", and exits 0 when the attempt succeeded, 1 when
// it was refused, 2 on a usage error.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// A check attempts one thing: nil when it succeeded (detail says what it
// got), an error when it was refused.
type check struct {
	usage string
	run   func(args []string) (detail string, err error)
}

var checks = map[string]check{
	"iouring-socket":  {"FAMILY (vsock, packet, inet): create a socket through io_uring (IORING_OP_SOCKET)", ioUringSocket},
	"tiocsti":         {"FD-or-/dev/tty TEXT: push TEXT into that terminal as input (ioctl TIOCSTI); TEXT is not printed", tiocsti},
	"pidfd-getfd":     {"PID FD [ADDR:PORT]: take fd FD out of process PID (pidfd_open, pidfd_getfd), and send a UDP datagram on it to ADDR:PORT", pidfdGetfd},
	"ptrace":          {"PID: attach to PID (PTRACE_SEIZE) and detach", ptraceAttach},
	"process-vm-read": {"PID: read 16 bytes of PID's memory (process_vm_readv)", processVMRead},
	"kcmp":            {"[PID]: compare our stdin with PID's (default: our own) (kcmp KCMP_FILE)", kcmpFiles},
	"proc-pids":       {"count the processes visible in /proc (always ok: \"N pids: ...\")", procPIDs},
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	name := os.Args[1]
	c, ok := checks[name]
	if !ok {
		usage()
	}
	detail, err := c.run(os.Args[2:])
	if ue, ok := err.(usageError); ok {
		fmt.Fprintf(os.Stderr, "sandboxprobe %s: %s\n", name, string(ue))
		os.Exit(2)
	}
	if err != nil {
		fmt.Printf("%s refused: %v\n", name, err)
		os.Exit(1)
	}
	fmt.Printf("%s ok %s\n", name, detail)
}

type usageError string

func (e usageError) Error() string { return string(e) }

func usage() {
	var names []string
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: sandboxprobe CHECK [ARG...]\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %s %s\n", n, checks[n].usage)
	}
	fmt.Fprint(os.Stderr, b.String())
	os.Exit(2)
}
