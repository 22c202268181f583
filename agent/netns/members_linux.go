package netns

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Members lists the processes (but this one) with a thread in the named
// namespace, by the namespace inode their /proc/PID/task/TID/ns/net
// names; sorted. Processes that end while it looks are skipped.
func Members(name string) ([]int, error) {
	var ns unix.Stat_t
	if err := unix.Stat(Path(name), &ns); err != nil {
		return nil, fmt.Errorf("stat netns %q: %w", name, err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		tasks, _ := os.ReadDir("/proc/" + p.Name() + "/task")
		if slices.ContainsFunc(tasks, func(task os.DirEntry) bool {
			var st unix.Stat_t
			err := unix.Stat("/proc/"+p.Name()+"/task/"+task.Name()+"/ns/net", &st)
			return err == nil && st.Ino == ns.Ino && st.Dev == ns.Dev
		}) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids) // /proc lists names, so "10001" before "9998"
	return pids, nil
}
