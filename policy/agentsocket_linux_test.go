package policy_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

const (
	mountsFull    = "24 30 0:21 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	mountsHybrid  = "25 30 0:22 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n26 30 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
	mountsSubroot = "24 30 0:21 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
)

func TestAgentSocketFromProc(t *testing.T) {
	inodes := func(m map[string]uint64) func(string) (uint64, error) {
		return func(p string) (uint64, error) {
			if v, ok := m[p]; ok {
				return v, nil
			}
			return 0, fs.ErrNotExist
		}
	}
	for _, tc := range []struct {
		name, cgroup, mounts string
		inodes               map[string]uint64
		want                 policy.AgentSocket
		err                  string
	}{
		{"whole hierarchy", "0::/kubepods.slice/pod1.slice/cri-x.scope\n", mountsFull,
			map[string]uint64{"/sys/fs/cgroup": 1, "/sys/fs/cgroup/kubepods.slice/pod1.slice/cri-x.scope": 77},
			policy.AgentSocket{CgroupID: 77, Level: 3}, ""},
		{"cgroup namespace", "0::/\n", mountsFull,
			map[string]uint64{"/sys/fs/cgroup": 77},
			policy.AgentSocket{CgroupID: 77}, ""},
		{"hybrid host", "12:memory:/x\n0::/agent\n", mountsHybrid,
			map[string]uint64{"/sys/fs/cgroup/unified": 1, "/sys/fs/cgroup/unified/agent": 90},
			policy.AgentSocket{CgroupID: 90, Level: 1}, ""},
		{"bind-mounted subtree", "0::/kubepods/pod1/agent\n", mountsSubroot,
			map[string]uint64{"/sys/fs/cgroup": 55, "/sys/fs/cgroup/agent": 56},
			policy.AgentSocket{CgroupID: 56}, ""},
		{"root cgroup", "0::/\n", mountsFull, map[string]uint64{"/sys/fs/cgroup": 1}, policy.AgentSocket{}, "root cgroup"},
		{"outside the namespace", "0::/../other\n", mountsFull, nil, policy.AgentSocket{}, "outside"},
		{"cgroup v1 only", "4:memory:/x\n", mountsFull, nil, policy.AgentSocket{}, "cgroup v2"},
		{"no cgroup2 mount", "0::/agent\n", "26 30 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw\n", nil, policy.AgentSocket{}, "no cgroup v2 file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := policy.AgentSocketFrom([]byte(tc.cgroup), []byte(tc.mounts), inodes(tc.inodes))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
