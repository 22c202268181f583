package e2e

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 22 item 1: a podman container confined to a namespace by the flags
// of `vpn-agent podman-flags NAME`, with Debian's podman and runc, a root
// made offline from busybox-static, storage of the test's own, and only
// namespaces the tests made (never a podman network).

// podman runs podman with storage, run and temp directories under a test
// directory, so the machine's own podman state is untouched.
type podman struct {
	base []string
	dir  string
	bb   []byte // a static busybox
	// files are more static programs for /bin of the containers' roots
	// (the container matrix's netprobe), by name.
	files map[string][]byte
	// images: run podman in a mount namespace of its own whose /var/lib
	// and /var/tmp are empty tmpfs mounts, so that image builds and loads
	// (which write /var/lib/containers/cache whatever --root says) and
	// buildah's temporary files touch nothing of the machine's; and give
	// every container rlimits it may set (a containers.conf of the
	// test's: `kube play` has no --ulimit).
	images bool
}

// The applets the probes use, as symlinks to /bin/busybox in the root.
var busyboxApplets = []string{"sh", "cat", "echo", "nc", "nslookup", "sleep", "grep", "timeout"}

// newPodman skips without podman, runc or a static busybox (scripts/deps.sh
// installs them) and removes every container at cleanup. Containers run
// from a root directory made offline (--rootfs: /bin/busybox and its
// applets), not from an image: `podman build` and `podman import` write the
// machine's /var/lib/containers/cache/blob-info-cache-v1.boltdb whatever
// --root says.
func newPodman(t *testing.T) *podman {
	t.Helper()
	if why := podmanMissing(); why != "" {
		t.Skip(why)
	}
	return podmanFor(t)
}

// podmanMissing says what of podman, runc and a static busybox is
// missing ("" when nothing is).
func podmanMissing() string {
	for _, b := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			return b + " is not installed (scripts/deps.sh installs podman, runc, catatonit, busybox-static)"
		}
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "busybox is not installed (scripts/deps.sh installs busybox-static)"
	}
	if err := isStatic(bb); err != nil {
		return err.Error() + " (install busybox-static)"
	}
	return ""
}

// isStatic fails unless path is a statically linked ELF program.
func isStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	if f.Section(".interp") != nil {
		return fmt.Errorf("%s is not statically linked", path)
	}
	return nil
}

// podmanFor is newPodman once podmanMissing said nothing is missing.
func podmanFor(t *testing.T) *podman {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	// A short directory of its own: podman refuses a --runroot longer
	// than 50 characters (t.TempDir's names grow with the test's).
	dir, err := os.MkdirTemp("", "vpnc-pm")
	if err != nil {
		t.Fatal(err)
	}
	p := &podman{dir: dir}
	if p.bb, err = os.ReadFile(bb); err != nil {
		t.Fatal(err)
	}
	// runc: Debian 12's crun refuses this machine's cgroup setup;
	// cgroupfs and no events: no systemd or journald involved; vfs: no
	// overlay mounts left behind.
	p.base = []string{"--root", filepath.Join(p.dir, "root"), "--runroot", filepath.Join(p.dir, "run"), "--tmpdir", filepath.Join(p.dir, "tmp"),
		"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=none", "--storage-driver=vfs"}
	t.Cleanup(func() {
		if out, err := p.cmd("rm", "--all", "--force", "--time", "0"); err != nil {
			t.Errorf("podman rm: %v: %s", err, out)
		}
		// conmon runs each removed container's exit command (`podman
		// container cleanup` with this --root) after the rm; it would
		// make the storage again in a directory removed before it ran.
		if pids := procsNaming(dir, 10*time.Second); len(pids) > 0 {
			t.Errorf("podman processes of %s still running 10s after podman rm: %v", dir, pids)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("podman's directory: %v", err)
		}
	})
	return p
}

// procsNaming waits up to within for the processes with s in their
// command line to exit, and returns the pids of those still running.
func procsNaming(s string, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		var pids []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(b, []byte(s)) {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rootfs makes a container root of its own: /bin/busybox and its applets.
func (p *podman) rootfs(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp(p.dir, "rootfs")
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Mkdir(filepath.Join(root, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), p.bb, 0o755))
	for _, a := range busyboxApplets {
		must(t, os.Symlink("busybox", filepath.Join(root, "bin", a)))
	}
	for name, b := range p.files {
		must(t, os.WriteFile(filepath.Join(root, "bin", name), b, 0o755))
	}
	return root
}

func (p *podman) cmd(args ...string) (string, error) {
	argv := append(append([]string{"podman"}, p.base...), args...)
	if p.images {
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -t tmpfs -o mode=0755 vpnc-podman /var/lib && mount -t tmpfs -o mode=01777 vpnc-podman /var/tmp && exec "$@"`, "sh"}, argv...)
	}
	c := exec.Command(argv[0], argv[1:]...)
	if p.images {
		c.Env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(p.dir, "containers.conf"))
	}
	out, err := c.CombinedOutput()
	return string(out), err
}

// withImages turns on p.images (see there).
func (p *podman) withImages(t *testing.T) {
	t.Helper()
	conf := "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n"
	must(t, os.WriteFile(filepath.Join(p.dir, "containers.conf"), []byte(conf), 0o644))
	p.images = true
}

// start runs a container with flags that sleeps until removed, and
// returns its name.
func (p *podman) start(t *testing.T, flags []string) string {
	t.Helper()
	var id [4]byte
	rand.Read(id[:])
	name := "vpnc-" + hex.EncodeToString(id[:])
	// Podman's default rlimits (nofile, nproc) cannot be set here without
	// CAP_SYS_RESOURCE; lower ones can.
	args := append([]string{"run", "--detach", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, flags...)
	if out, err := p.cmd(append(args, "--rootfs", p.rootfs(t), "sleep", "3600")...); err != nil {
		t.Fatalf("podman run %s: %v: %s", strings.Join(flags, " "), err, out)
	}
	return name
}

// sh runs script in the running container name.
func (p *podman) sh(name, script string) (string, error) {
	return p.cmd("exec", name, "sh", "-c", script)
}

// podmanFlags are the agent's flags for namespace ns.
func podmanFlags(t *testing.T, ag agentproc.Agent, ns string) []string {
	t.Helper()
	o := ag.MustCmd(t, "podman-flags", ns)
	return strings.Fields(o.Stdout)
}

// withNetwork replaces the --network flag of flags.
func withNetwork(flags []string, ns string) []string {
	out := slices.Clone(flags)
	for i, f := range out {
		if strings.HasPrefix(f, "--network=") {
			out[i] = "--network=ns:" + names.Netns(ns)
		}
	}
	return out
}

// The container probes: TCP echo of a marker, and a lookup of TargetName
// (at server, or through /etc/resolv.conf when server is "").
func echoScript(dst string, m []byte) string {
	return "echo " + string(m) + " | timeout 5 nc -w 3 " + dst + " 7"
}

func lookupScript(server string) string {
	return "nslookup -timeout=2 -retry=1 " + testbed.TargetName + " " + server
}

// answered reports whether a busybox nslookup output names addr as an
// answer for TargetName (not merely as the server asked).
func answered(out, addr string) bool {
	_, ans, ok := strings.Cut(out, "Name:")
	return ok && strings.Contains(ans, testbed.TargetName) && strings.Contains(ans, "Address: "+addr)
}

// A confined container reaches the target through the tunnel, resolves
// through the tunnel's resolver, sees the namespace's resolver files and
// interfaces, has neither NET_ADMIN nor NET_RAW, is refused DNS to any
// other resolver and anything outside the tunnel, and sends nothing on the
// uplink once the peer is dead. The positive control is the same root
// and flags on a namespace the test made with a route out (the
// topology's host namespace): it reaches the decoy and its resolver, and
// the decoy logs it.
func TestPodmanConfined(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{HostLink: true})
	pm := newPodman(t)
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("precondition: no traffic through the tunnel: %v", r)
	}
	flags := podmanFlags(t, c.ag, c.name)
	if len(flags) == 0 || flags[0] != "--network=ns:"+names.Netns(c.name) {
		t.Fatalf("podman-flags %s printed %q", c.name, flags)
	}
	ctr := pm.start(t, flags)
	decoyEcho := testbed.DecoyTarget4.String()
	decoyDNS := testbed.DecoyDNS4.String()

	t.Run("control: the same container on a plain namespace reaches the decoy", func(t *testing.T) {
		plain := pm.start(t, withNetwork(flags, c.tp.Host))
		mark := c.tp.Decoy.Mark()
		m := harness.Marker("podman-control")
		if out, err := pm.sh(plain, echoScript(decoyEcho, m)); err != nil || !strings.Contains(out, string(m)) {
			t.Fatalf("control: echo to the decoy from a plain namespace: %v: %q (the probe proves nothing)", err, out)
		}
		if out, err := pm.sh(plain, lookupScript(decoyDNS)); err != nil || !answered(out, testbed.DecoyAnswer4.String()) {
			t.Fatalf("control: lookup at the decoy resolver from a plain namespace: %v: %q", err, out)
		}
		hits := harness.Hits(t, c.tp.Decoy, mark)
		if !slices.ContainsFunc(hits, func(e provider.Event) bool { return e.Kind == provider.EvDNS && e.Name == testbed.TargetName+"." }) &&
			!slices.ContainsFunc(hits, func(e provider.Event) bool { return e.Kind == provider.EvDNS && e.Name == testbed.TargetName }) {
			t.Fatalf("control: the decoy did not log the plain container's lookup:\n%s", harness.DumpEvents(hits))
		}
	})

	t.Run("inside", func(t *testing.T) {
		out, err := pm.sh(ctr, "cat /etc/resolv.conf; grep CapBnd /proc/self/status; cat /proc/net/dev")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if want := harness.ReadFile(t, names.ResolvConf(c.name)); !strings.HasPrefix(out, want) {
			t.Errorf("the container's /etc/resolv.conf is not the namespace's %q:\n%s", want, out)
		}
		for _, ifc := range []string{"lo:", c.iface() + ":", names.NSVeth(c.name) + ":"} {
			if !strings.Contains(out, ifc) {
				t.Errorf("the container does not see %s of the namespace:\n%s", ifc, out)
			}
		}
		// Default podman bounding set without NET_ADMIN (bit 12) and
		// NET_RAW (bit 13).
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
				var bits uint64
				for _, ch := range strings.TrimSpace(v) {
					bits = bits<<4 | uint64(strings.IndexRune("0123456789abcdef", ch))
				}
				if bits&(1<<12|1<<13) != 0 || bits == 0 {
					t.Errorf("the container's bounding set %s has NET_ADMIN or NET_RAW (or is unreadable)", strings.TrimSpace(v))
				}
			}
		}
	})

	t.Run("through the tunnel", func(t *testing.T) {
		m := harness.Marker("podman-tunnel")
		out, err := pm.sh(ctr, echoScript(testbed.ProvTunnel4.String(), m))
		if err != nil || !strings.Contains(out, string(m)) {
			t.Errorf("echo to the tunnel target from the container: %v: %q", err, out)
		}
		mark := c.tp.Provider.Mark()
		out, err = pm.sh(ctr, lookupScript(""))
		if err != nil || !answered(out, testbed.ProvTunnel4.String()) {
			t.Errorf("lookup through the container's resolv.conf: %v: %q", err, out)
		}
		hits := harness.Hits(t, c.tp.Provider, mark)
		if !slices.ContainsFunc(hits, func(e provider.Event) bool {
			return e.Kind == provider.EvDNS && harness.HostOf(e.Src) == testbed.ClientTunnel4
		}) {
			t.Errorf("the provider's resolver did not log a query from the tunnel:\n%s", harness.DumpEvents(hits))
		}
	})

	// Everything outside the tunnel, with the tunnel up and then with the
	// peer dead: the decoys log nothing, the uplink carries only WireGuard.
	// The captures see any packet these send out of the namespace: TCP to
	// the decoy (echo, HTTPS), its IPv6 address and a LAN host; DNS to the
	// decoy's resolvers on 53 and 5353.
	leakScript := echoScript(decoyEcho, harness.Marker("podman-leak")) + "; " +
		"timeout 5 nc -w 2 " + decoyEcho + " 443 </dev/null; " +
		"timeout 5 nc -w 2 " + testbed.DecoyTarget6.String() + " 7 </dev/null; " +
		"timeout 5 nc -w 2 " + testbed.LANHost4.String() + " 7 </dev/null; " +
		lookupScript(decoyDNS) + "; nslookup -timeout=2 -retry=1 -port=5353 " + testbed.TargetName + " " + decoyDNS
	for _, stage := range []string{"tunnel up", "peer dead"} {
		t.Run(stage, func(t *testing.T) {
			if stage == "peer dead" {
				c.tp.BlockWG(t)
				t.Cleanup(func() { c.tp.UnblockWG(t) })
			}
			w := c.tp.WatchHost(t, c.name)
			w.MarkDecoys(t)
			out, _ := pm.sh(ctr, leakScript)
			if answered(out, testbed.DecoyAnswer4.String()) || strings.Contains(out, "podman-leak") {
				t.Errorf("LEAK: the container got an answer from outside the tunnel:\n%s", out)
			}
			if stage == "peer dead" {
				m := harness.Marker("podman-dead")
				if out, _ := pm.sh(ctr, echoScript(testbed.ProvTunnel4.String(), m)+"; "+lookupScript("")); strings.Contains(out, string(m)) || answered(out, testbed.ProvTunnel4.String()) {
					t.Errorf("the tunnel target answered with the peer dead (the block does not hold):\n%s", out)
				}
			}
			w.Stop(t, harness.WGBounce).Report(t, false)
		})
	}
}

// What a user adds to the flags that would undo them fails: a bind of a
// host resolver directory at its own path (the mask is there), and a
// --cap-add of a dropped capability. Controls: the same bind without the
// masks, and the same capability without the drop, start.
func TestPodmanAdditionsRefused(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	pm := newPodman(t)
	flags := podmanFlags(t, c.ag, c.name)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "socket-stand-in"), []byte("host"), 0o644))
	bind := "--volume=" + src + ":/run/nscd:ro"
	noMasks := slices.DeleteFunc(slices.Clone(flags), func(f string) bool { return strings.HasPrefix(f, "--tmpfs=") })
	noDrops := slices.DeleteFunc(slices.Clone(flags), func(f string) bool { return strings.HasPrefix(f, "--cap-drop=") })
	run := func(flags ...string) (string, error) {
		return pm.cmd(append(append([]string{"run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, flags...),
			"--rootfs", pm.rootfs(t), "sh", "-c", "cat /run/nscd/socket-stand-in; grep CapBnd /proc/self/status")...)
	}
	if out, err := run(append(noMasks, bind)...); err != nil || !strings.HasPrefix(out, "host") {
		t.Fatalf("control: the bind without the masks: %v: %q", err, out)
	}
	if out, err := run(append(flags, bind)...); err == nil || !strings.Contains(out, "duplicate mount destination") {
		t.Errorf("a bind over the /run/nscd mask: want podman's duplicate mount destination error, got %v: %q", err, out)
	}
	if out, err := run(append(noDrops, "--cap-add=NET_ADMIN")...); err != nil || !strings.Contains(out, "CapBnd") {
		t.Fatalf("control: --cap-add=NET_ADMIN without the drop: %v: %q", err, out)
	}
	for _, capability := range []string{"NET_ADMIN", "NET_RAW"} {
		if out, err := run(append(flags, "--cap-add="+capability)...); err == nil || !strings.Contains(out, "cannot be dropped and added") {
			t.Errorf("--cap-add=%s with the flags: want podman's error, got %v: %q", capability, err, out)
		}
	}
}

// After a failover to a server with another resolver, the running
// container resolves through the new one, without a restart: its
// /etc/resolv.conf is the namespace's file, rewritten in place.
func TestPodmanFailoverResolver(t *testing.T) {
	t.Parallel()
	// The agent's probe finds the dead server whether or not anything
	// else sends (an idle tunnel is not a dead one).
	s := newPoolSite(t, "", both, withProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	pm := newPodman(t)
	ctr := pm.start(t, podmanFlags(t, s.ag, s.name))
	started, err := pm.cmd("inspect", "--format", "{{.State.StartedAt}}", ctr)
	if err != nil {
		t.Fatalf("podman inspect: %v: %s", err, started)
	}
	if out, err := pm.sh(ctr, lookupScript("")); err != nil || !answered(out, testbed.ProvTunnel4.String()) {
		t.Fatalf("positive control: before the failover the container does not resolve through the first server: %v: %q", err, out)
	}
	t0 := time.Now()
	s.ProvA.Kill()
	s.watch(t, t0, 60*time.Second, true)
	s.mustWork(t, 5*time.Second, 1, "after the failover")
	var out string
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err = pm.sh(ctr, "cat /etc/resolv.conf; "+lookupScript(""))
		if (err == nil && answered(out, testbed.Prov2Tunnel4.String())) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !answered(out, testbed.Prov2Tunnel4.String()) || !strings.Contains(out, "nameserver "+testbed.Prov2Tunnel4.String()) {
		t.Errorf("after the failover the running container does not resolve through the second server's resolver: %v:\n%s", err, out)
	}
	if now, _ := pm.cmd("inspect", "--format", "{{.State.StartedAt}}", ctr); now != started {
		t.Errorf("the container was restarted (started %s, now %s)", strings.TrimSpace(started), strings.TrimSpace(now))
	}
}

// podmanCgroupDir is where podman 4.3 (cgroupfs manager) makes a cgroup
// v2 directory per container and pod on a machine that mounts v1 and v2
// side by side; it removes the v1 ones with the container, not these.
const podmanCgroupDir = "/sys/fs/cgroup/unified/libpod_parent"

// podmanCgroups lists podmanCgroupDir's entries.
func podmanCgroups() map[string]bool {
	ents, _ := os.ReadDir(podmanCgroupDir)
	m := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() {
			m[e.Name()] = true
		}
	}
	return m
}

// removePodmanCgroups removes the (empty) cgroups the suite's containers
// and pods left in podmanCgroupDir, children first, and returns those it
// could not remove. The ones in before were there already: not ours.
func removePodmanCgroups(before map[string]bool) []string {
	var left []string
	for name := range podmanCgroups() {
		if before[name] {
			continue
		}
		root := filepath.Join(podmanCgroupDir, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			// EBUSY: processes in it, so a container still running, of
			// another podman user on this machine: not the suite's.
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EBUSY) {
				left = append(left, dirs[i]+": "+err.Error())
			}
		}
	}
	return left
}
