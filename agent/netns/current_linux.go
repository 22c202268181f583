package netns

import (
	"sync"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// The sidecar mode confines the network namespace the agent was started
// in (a Kubernetes pod's, a compose service's): there is no
// /run/netns/NAME, and the agent could not make one (no CAP_SYS_ADMIN in
// a container). UseCurrent makes NAME stand for the process's own
// namespace, once, where the mode is chosen (the engine for the agent,
// the state file for status and down); every other use of the name
// (Exists, Open, Handle, Do, Members, Path) then works on that namespace
// unchanged, and Create and Delete refuse or do nothing.
//
// The process's namespace is its main thread's (/proc/self/ns/net): in
// this mode nothing ever moves a thread into another namespace (Do
// switches a locked thread into the same one).

// SelfPath is the process's own network namespace.
const SelfPath = "/proc/self/ns/net"

var current struct {
	sync.RWMutex
	name string
}

// UseCurrent makes name stand for the calling process's own network
// namespace from now on.
func UseCurrent(name string) {
	current.Lock()
	current.name = name
	current.Unlock()
}

// IsCurrent says whether name stands for the process's own namespace.
func IsCurrent(name string) bool {
	current.RLock()
	defer current.RUnlock()
	return name != "" && name == current.name
}

// Path is the file that names the namespace name: its bind mount under
// /run/netns, or SelfPath for the process's own (UseCurrent).
func Path(name string) string {
	if IsCurrent(name) {
		return SelfPath
	}
	return names.Netns(name)
}
