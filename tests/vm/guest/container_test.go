package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// Issue 22 item 1 under systemd 252: a podman container (Debian's podman, runc, an image
// built offline FROM scratch with busybox-static) whose service is made by docs/systemd.md's
// "Podman containers" block, run as written (the namespace, container and image names
// substituted): `podman run $(vpn-agent podman-flags NAME) IMAGE` in the foreground,
// `vpn-agent unit NAME --container` as its drop-in and `--restart-with-agent` on the agent.
//
//   - container-restarts-with-agent: the container runs in the namespace (its netns cookie is
//     /run/netns/NAME's) and reaches the tunnel's echo. `systemctl restart` of the agent: the
//     agent makes a new namespace (a new netns cookie: inode numbers are reused); the container is stopped with the agent (its
//     process is gone, nothing is left in the old namespace) and runs again after the new
//     agent's READY=1, in the new namespace, reaching the echo. SIGKILL of the agent: the
//     container is stopped (BindsTo=) and started again by the agent's Wants=, in the
//     namespace at /run/netns/NAME then (the agent takes the old one over). Meanwhile the
//     container keeps trying the host's resolver and the endpoint off the tunnel: the uplink
//     carries nothing but WireGuard (positive control: the same probes from the host are
//     seen there). `systemctl stop` of the agent stops the container.

// ctrProbes is the container's command: the tunnel's echo, the host's resolver and the
// endpoint off the tunnel, over and over; it ends on SIGTERM (PID 1 has no default action).
var ctrProbes = `trap 'exit 0' TERM INT
while :; do
	echo ping | timeout 3 nc -w 2 ` + sdTunSrv.String() + ` 7 >/dev/null 2>&1
	echo probe | timeout 2 nc -u -w 1 ` + sdResolver.String() + ` 53 >/dev/null 2>&1
	echo probe | timeout 2 nc -w 1 ` + sdEndpoint.String() + ` 53 >/dev/null 2>&1
	sleep 1
done
`

func TestContainerRestartsWithAgent(t *testing.T) {
	requireInjected(t, "the image's podman, runc and busybox-static; run.sh injects docs/systemd.md",
		"/usr/bin/podman", "/usr/sbin/runc", "/bin/busybox", walkthroughDoc)
	f := newSDFixture(t)
	check(t, "container-restarts-with-agent", func(t *testing.T) {
		ctr := "vmtest-ctr-" + f.name
		unit := ctr + ".service"
		image := "localhost/" + ctr
		podmanSetup(t, f.dir, image)
		t.Cleanup(func() {
			_, _ = runErr("systemctl", "disable", "--now", unit)
			for _, p := range []string{"/etc/systemd/system/" + unit, "/etc/systemd/system/" + unit + ".d",
				"/etc/systemd/system/" + f.agent + ".d"} {
				os.RemoveAll(p)
			}
			_, _ = runErr("systemctl", "daemon-reload")
			_, _ = runErr("podman", "rm", "-f", "--ignore", ctr)
			_, _ = runErr("podman", "rmi", "-f", image)
		})

		// docs/systemd.md's block, as written but for the names.
		blocks, err := markedBlocks(walkthroughDoc, podmanDocMark)
		if err != nil || len(blocks) != 1 || blocks[0].name != "container" {
			t.Fatalf("docs/systemd.md: want one block marked vm-podman: container, got %v (%v)", blocks, err)
		}
		script := strings.NewReplacer("proton", f.name, "web", ctr).Replace(blocks[0].script)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("docs/systemd.md:%d (%.1fs):\n%s\n%s", blocks[0].line, time.Since(t0).Seconds(), script, out)
		if err != nil {
			t.Fatalf("docs/systemd.md:%d failed: %v\n%s\n%s\n%s", blocks[0].line, err, out, unitDiag(unit), unitDiag(f.agent))
		}
		t.Logf("%s:\n%s", unit, harness.ReadFile(t, "/etc/systemd/system/"+unit))

		// running waits for the container to run in the namespace at /run/netns/NAME, in
		// a process other than not, and returns its pid.
		running := func(t *testing.T, not int, what string) int {
			t.Helper()
			var pid int
			var last string
			if !waitFor(180*time.Second, func() bool { // podman under TCG on a loaded machine: ~2 min seen
				pid, last = ctrPid(ctr)
				if pid == 0 || pid == not {
					return false
				}
				ns, err := netnsCookie(fmt.Sprintf("/proc/%d/ns/net", pid))
				cur, err2 := netnsCookie(names.Netns(f.name))
				return err == nil && err2 == nil && ns == cur
			}) {
				t.Fatalf("%s: the container does not run in /run/netns/%s (pid %d, podman: %s)\n%s\n%s", what, f.name, pid, last, unitDiag(unit), unitDiag(f.agent))
			}
			return pid
		}
		reaches := func(t *testing.T, what string) {
			t.Helper()
			out, err := runErr("podman", "exec", ctr, "sh", "-c", "echo ping | timeout 5 nc -w 3 "+sdTunSrv.String()+" 7")
			if err != nil || !strings.Contains(out, "ping") {
				t.Errorf("%s: the container does not reach the tunnel's echo: %v %q", what, err, out)
			}
		}
		// gone fails unless pid is dead and nothing runs in the namespace of cookie ns.
		gone := func(t *testing.T, pid int, ns uint64, what string) {
			t.Helper()
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("%s: the container's old process %d still runs", what, pid)
			}
			if left := inNetns(ns); len(left) > 0 {
				t.Errorf("%s: processes still in the old namespace (cookie %d): %v", what, ns, left)
			}
		}
		// afterReady fails unless the container's service (re)started after the agent's READY=1.
		afterReady := func(t *testing.T, what string) {
			t.Helper()
			ready, s := propInt(t, f.agent, "ActiveEnterTimestampMonotonic"), propInt(t, unit, "InactiveExitTimestampMonotonic")
			if s < ready {
				t.Errorf("%s: %s started (%d µs) before the agent's READY=1 (%d µs)", what, unit, s, ready)
			}
		}

		if a := active(f.agent); a != "active" {
			t.Fatalf("enabling %s did not start %s (BindsTo=): %s\n%s", unit, f.agent, a, unitDiag(f.agent))
		}
		pid := running(t, 0, "started")
		afterReady(t, "started")
		reaches(t, "started")

		// Positive control of the uplink captures: the container's probes, run on the host,
		// are seen there.
		obs := f.uplinkCapture(t)
		hostProbe := strings.SplitN(ctrProbes, "\n", 6)
		_, _ = runErr("busybox", "sh", "-c", strings.Join(hostProbe[3:5], "\n")) // refused or unanswered: exits non-zero
		if leaks, _ := f.stopUplink(t, obs); len(leaks) == 0 {
			t.Fatalf("positive control: the container's probes, run on the host, left nothing on the uplink: the capture cannot tell")
		}

		// systemctl restart: a new namespace, the container in it.
		obs = f.uplinkCapture(t)
		// Namespaces are told apart by their cookie, never reused; an inode number is
		// (a namespace freed at once on a quiet machine gives its number to the next).
		oldNS := cookie(t, names.Netns(f.name))
		inv := prop(t, unit, "InvocationID")
		t0 = time.Now()
		run(t, "systemctl", "restart", f.agent)
		pid2 := running(t, pid, "after systemctl restart")
		t.Logf("systemctl restart %s: the container runs again %.1fs later (pid %d, was %d)", f.agent, time.Since(t0).Seconds(), pid2, pid)
		if newNS := cookie(t, names.Netns(f.name)); newNS == oldNS {
			t.Errorf("the restarted agent kept the namespace (cookie %d): the check proves less than it says", oldNS)
		}
		if prop(t, unit, "InvocationID") == inv {
			t.Errorf("%s was not restarted with the agent (same InvocationID)", unit)
		}
		gone(t, pid, oldNS, "after systemctl restart")
		afterReady(t, "after systemctl restart")
		reaches(t, "after systemctl restart")

		j, _ := runErr("journalctl", "--no-pager", "-o", "short-monotonic", "-n", "40", "-u", unit, "-u", f.agent)
		t.Logf("journal of %s and %s:\n%s", unit, f.agent, j)

		// SIGKILL: stopped (BindsTo=), started again by the agent's Wants=.
		agentPid := propInt(t, f.agent, "MainPID")
		inv = prop(t, unit, "InvocationID")
		ns := cookie(t, names.Netns(f.name))
		t0 = time.Now()
		run(t, "systemctl", "kill", "-s", "KILL", f.agent)
		if !waitFor(120*time.Second, func() bool {
			return active(f.agent) == "active" && propInt(t, f.agent, "MainPID") != agentPid &&
				active(unit) == "active" && prop(t, unit, "InvocationID") != inv
		}) {
			t.Fatalf("agent %s, %s %s 120 s after SIGKILL\n%s\n%s", active(f.agent), unit, active(unit), unitDiag(f.agent), unitDiag(unit))
		}
		pid3 := running(t, pid2, "after SIGKILL")
		t.Logf("SIGKILL of %s: the container runs again %.1fs later (pid %d, was %d; namespace cookie %d, was %d)",
			f.agent, time.Since(t0).Seconds(), pid3, pid2, cookie(t, names.Netns(f.name)), ns)
		if syscall.Kill(pid2, 0) == nil {
			t.Errorf("after SIGKILL: the container's old process %d still runs", pid2)
		}
		afterReady(t, "after SIGKILL")
		reaches(t, "after SIGKILL")

		leaks, all := f.stopUplink(t, obs)
		if !slices.ContainsFunc(all, sdWG) {
			t.Errorf("no WireGuard on the uplink across the restarts: the capture proves little:\n%s", observe.Dump(all))
		}
		if len(leaks) > 0 {
			t.Errorf("LEAK on the uplink while the container restarted with the agent:\n%s", observe.Dump(leaks))
		}

		// systemctl stop of the agent stops the container.
		ns = cookie(t, names.Netns(f.name))
		run(t, "systemctl", "stop", f.agent)
		if a := active(unit); a == "active" {
			t.Errorf("%s still %s after systemctl stop %s", unit, a, f.agent)
		}
		gone(t, pid3, ns, "after systemctl stop")
		// Only stdout lists containers: podman warns on stderr (e.g. "Found incomplete
		// layer ..., deleting it" after the SIGKILLed agent took a container down with it).
		var stderr strings.Builder
		ps := exec.Command("podman", "ps", "-q")
		ps.Stderr = &stderr
		if out, err := ps.Output(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("podman still runs containers after the agent stopped (podman ps -q: %v):\n%s%s", err, out, stderr.String())
		}
	})
}

// podmanDocMark marks docs/systemd.md's podman block.
var podmanDocMark = regexp.MustCompile(`^<!-- vm-podman: ([a-z-]+) -->$`)

// podmanSetup configures the guest's podman and builds image, offline, FROM scratch: busybox
// and the probes. The VM's root is the initramfs, where pivot_root(2) fails (EINVAL): runc
// chroots instead; vfs storage (no overlay over the initramfs).
func podmanSetup(t *testing.T, dir, image string) {
	t.Helper()
	writeFile(t, "/etc/containers/containers.conf", "[engine]\nruntime = \"runc\"\nno_pivot_root = true\n")
	writeFile(t, "/etc/containers/storage.conf", "[storage]\ndriver = \"vfs\"\nrunroot = \"/run/containers/storage\"\ngraphroot = \"/var/lib/containers/storage\"\n")
	ctx := filepath.Join(dir, "image")
	root := filepath.Join(ctx, "root")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "run", "tmp", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "cp", "/bin/busybox", filepath.Join(root, "bin", "busybox"))
	for _, a := range []string{"sh", "nc", "sleep", "timeout", "echo", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "probes.sh"), ctrProbes)
	writeFile(t, filepath.Join(ctx, "Containerfile"), "FROM scratch\nCOPY root/ /\nCMD [\"/bin/sh\", \"/probes.sh\"]\n")
	t0 := time.Now()
	out := run(t, "podman", "build", "--pull=never", "-t", image, ctx)
	t.Logf("podman build %s (%.1fs):\n%s", image, time.Since(t0).Seconds(), out)
	info, _ := runErr("podman", "info", "--format", "{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}} {{.Store.GraphDriverName}} {{.Host.CgroupManager}}")
	t.Logf("podman info: %s", info)
}

// ctrPid returns the running container's pid (0 if it does not run) and what podman said.
func ctrPid(name string) (int, string) {
	out, err := runErr("podman", "inspect", "-f", "{{.State.Running}} {{.State.Pid}}", name)
	if err != nil {
		return 0, strings.TrimSpace(out)
	}
	running, p, _ := strings.Cut(strings.TrimSpace(out), " ")
	pid, _ := strconv.Atoi(p)
	if running != "true" {
		pid = 0
	}
	return pid, strings.TrimSpace(out)
}

// netnsCookie is the SO_NETNS_COOKIE of the network namespace at path (a
// /run/netns bind mount or /proc/PID/ns/net): unlike its inode number, never
// reused for another namespace. Read from a socket made in it by a thread that
// joins it and is then discarded (it exits locked).
func netnsCookie(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	type res struct {
		c   uint64
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{0, fmt.Errorf("setns %s: %w", path, err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ch <- res{0, err}
			return
		}
		defer unix.Close(fd)
		c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func cookie(t *testing.T, path string) uint64 {
	t.Helper()
	c, err := netnsCookie(path)
	if err != nil {
		t.Fatalf("netns cookie of %s: %v", path, err)
	}
	return c
}

// inNetns lists the processes in the network namespace of cookie ns, but this test
// process: netnsCookie enters the namespace on a locked thread that ends with its
// goroutine, but when that thread is the process's main thread Go cannot end it and parks
// it there, so /proc/self/ns/net (the main thread's) can name the namespace (seen once in
// CI: "processes still in the old namespace (cookie 18): [2192 guest.test]").
func inNetns(ns uint64) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if n, err := netnsCookie(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && n == ns {
			comm, _ := os.ReadFile(d + "/comm")
			out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(comm))))
		}
	}
	return out
}

// TestPodmanDocBlock (host and guest): docs/systemd.md has the one block container_test.go
// runs, and it uses the product's commands, not copies of their output.
func TestPodmanDocBlock(t *testing.T) {
	doc := "../../../docs/systemd.md"
	if os.Getenv("VPNC_VM_GUEST") == "1" {
		doc = walkthroughDoc
	}
	blocks, err := markedBlocks(doc, podmanDocMark)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].name != "container" {
		t.Fatalf("docs/systemd.md: want one block marked vm-podman: container, got %v", blocks)
	}
	for _, w := range []string{"$(vpn-agent podman-flags proton ", "vpn-agent unit proton --container >", "vpn-agent unit proton --restart-with-agent web.service"} {
		if !strings.Contains(blocks[0].script, w) {
			t.Errorf("docs/systemd.md:%d: the podman block lacks %q:\n%s", blocks[0].line, w, blocks[0].script)
		}
	}
}
