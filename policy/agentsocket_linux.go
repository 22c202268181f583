package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRootID is the id of the root of the cgroup v2 hierarchy (the
// inode number of its directory).
const cgroupRootID = 1

// SelfAgentSocket returns the identity of the calling process's sockets:
// its cgroup v2 (see AgentSocket). Sockets are charged to the cgroup of
// the task that creates them, so the userspace backend's UDP socket,
// opened by the agent process, matches. The kernel backend's socket would
// be charged to the agent too (it is created in the context of the
// netlink request that brings the device up), but the kernel sends
// WireGuard packets without it: skb->sk is NULL for handshakes and
// keepalives and the inner packet's socket (the app's) for data, so the
// kernel backend cannot be used with the sidecar kill switch.
func SelfAgentSocket() (AgentSocket, error) {
	return AgentSocketOf(os.Getpid())
}

// AgentSocketOf returns the AgentSocket of process pid, read from
// /proc/PID/cgroup and /proc/self/mountinfo (the cgroup v2 mount, as this
// process sees it). The level is known when that mount shows the whole
// hierarchy (its root is the real root, id 1) and unknown (0) inside a
// cgroup namespace. It refuses the root cgroup, which every socket
// descends from, and a host without the cgroup v2 hierarchy.
func AgentSocketOf(pid int) (AgentSocket, error) {
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return AgentSocket{}, fmt.Errorf("agent cgroup: %w", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return AgentSocket{}, fmt.Errorf("agent cgroup: %w", err)
	}
	a, err := agentSocket(cg, mi, stat)
	if err != nil {
		return AgentSocket{}, fmt.Errorf("agent cgroup of process %d: %w", pid, err)
	}
	return a, nil
}

func stat(p string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// agentSocket works out the AgentSocket from /proc/PID/cgroup and
// /proc/self/mountinfo, with ino to read an inode number.
func agentSocket(cgroup, mountinfo []byte, ino func(string) (uint64, error)) (AgentSocket, error) {
	var rel string
	found := false
	for _, l := range strings.Split(string(cgroup), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return AgentSocket{}, errors.New(`no cgroup v2 membership ("0::" line): the sidecar kill switch needs the cgroup v2 hierarchy`)
	}
	if !path.IsAbs(rel) || strings.Contains(rel, "/..") {
		// Outside our cgroup namespace's root: not a path we can open.
		return AgentSocket{}, fmt.Errorf("cgroup %q is outside this cgroup namespace", rel)
	}
	mnt, root, err := cgroup2Mount(mountinfo)
	if err != nil {
		return AgentSocket{}, err
	}
	sub, ok := strings.CutPrefix(rel, root)
	if root != "/" && !ok {
		return AgentSocket{}, fmt.Errorf("cgroup %q is not under the cgroup v2 mount's root %q", rel, root)
	}
	if root == "/" {
		sub = rel
	}
	id, err := ino(filepath.Join(mnt, sub))
	if err != nil {
		return AgentSocket{}, fmt.Errorf("cgroup %q: %w", rel, err)
	}
	if id == cgroupRootID {
		return AgentSocket{}, errors.New("the agent runs in the root cgroup, and a match on it would let every socket pass as the agent; run the agent in a cgroup of its own (its own container)")
	}
	a := AgentSocket{CgroupID: id}
	if rootID, err := ino(mnt); err == nil && rootID == cgroupRootID && root == "/" {
		a.Level = len(strings.FieldsFunc(rel, func(r rune) bool { return r == '/' }))
	}
	return a, nil
}

// cgroup2Mount returns the mount point and root of the first cgroup v2
// mount in mountinfo.
func cgroup2Mount(mountinfo []byte) (mnt, root string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		return unescape(f[4]), unescape(f[3]), nil
	}
	return "", "", errors.New("no cgroup v2 file system is mounted (mount it at /sys/fs/cgroup; Docker and Kubernetes do)")
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
