package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procStatTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture the bench runs on.
const procStatTicks = 100

// machineCPU returns, summed over all CPUs from /proc/stat, the ticks
// (USER_HZ) not spent busy - idle, iowait and steal (time the hypervisor
// gave to someone else) - and the number of CPUs. Busy time is derived as
// elapsed time x CPUs minus these: the kernel keeps idle time exactly,
// while its user/system split is sampled at the tick and misses bursty
// work that sleeps at tick time.
func machineCPU() (notBusy uint64, cpus int, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "cpu") {
			cpus++
		}
	}
	notBusy, err = parseCPULine(lines[0])
	return notBusy, cpus, err
}

// parseCPULine returns idle + iowait + steal from the "cpu" line.
func parseCPULine(line string) (uint64, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("parse /proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal ...
	var n uint64
	for _, i := range []int{4, 5, 8} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		n += v
	}
	return n, nil
}

// schedstat returns the CPU time of every live thread of pid, summed from
// /proc/<pid>/task/*/schedstat (nanosecond resolution). Threads that have
// exited are not counted, so use it for long-lived processes.
func schedstat(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("schedstat of pid %d: no tasks", pid)
	}
	var sum time.Duration
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", p, err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// selfCPU is the whole bench process's CPU time, exited threads included
// (the kernel sums the same per-thread runtime schedstat shows).
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// vmHWM returns a process's peak resident set size in KiB (0 if unknown).
func vmHWM(pid int) int64 { return procStatusKiB(pid, "VmHWM:") }

// vmRSS returns a process's resident set size in KiB (0 if unknown).
func vmRSS(pid int) int64 { return procStatusKiB(pid, "VmRSS:") }

// rssAnon returns the anonymous part of a process's resident set in KiB
// (heap, stacks; the rest is mostly the binary's pages, RssFile).
func rssAnon(pid int) int64 { return procStatusKiB(pid, "RssAnon:") }

// pss returns a process's proportional set size in KiB: its resident
// pages, each shared page divided by the processes sharing it (what N
// agents of one binary cost together, divided by N).
func pss(pid int) int64 { return procFileKiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:") }

// procStatusKiB reads one "kB" field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) int64 {
	return procFileKiB(fmt.Sprintf("/proc/%d/status", pid), field)
}

// procFileKiB reads one "kB" field of a /proc file.
func procFileKiB(path, field string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// resetHWM resets a process's peak RSS to its current RSS (Linux >= 4.0),
// so VmHWM afterwards is the peak during what follows.
func resetHWM(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// cpuSnap is a point-in-time CPU reading.
type cpuSnap struct {
	at      time.Time
	notBusy uint64 // idle + iowait + steal ticks, all CPUs
	cpus    int
	self    time.Duration
	procs   map[int]time.Duration
}

func takeCPU(pids ...int) cpuSnap {
	s := cpuSnap{at: time.Now(), self: selfCPU(), procs: map[int]time.Duration{}}
	s.notBusy, s.cpus, _ = machineCPU()
	for _, p := range pids {
		if p > 0 {
			s.procs[p], _ = schedstat(p)
		}
	}
	return s
}

// procDelta returns the CPU seconds pid used between a and b, or nil if
// it was not tracked.
func procDelta(a, b cpuSnap, pid int) *float64 {
	x, ok1 := a.procs[pid]
	y, ok2 := b.procs[pid]
	if pid <= 0 || !ok1 || !ok2 {
		return nil
	}
	v := (y - x).Seconds()
	return &v
}
