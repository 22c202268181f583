// Package e2e holds the end-to-end tests: real namespaces, a userspace
// WireGuard provider, nftables, captures. They need root and iproute2,
// nftables and /dev/net/tun, and skip (all of them, with the reason)
// otherwise.
//
//	sudo go test ./tests/e2e/ [-run Agent] [-agent /path/to/vpn-agent] [-agent-hooks /path/to/vpn-agent] [-provider /path/to/provider] [-v]
//
// TestMain builds tests/cmd/provider, agent/cmd/vpn-agent and, for the
// fault suite, agent/cmd/vpn-agent again with -tags vpnagent_testhooks
// (the production build has no fault-injection hooks), and
// tests/cmd/sandboxprobe and tests/cmd/netprobe (static: the leak matrix
// copies it into its podman containers' roots), unless
// -provider/$VPN_E2E_PROVIDER, -agent/$VPN_E2E_AGENT and
// -agent-hooks/$VPN_E2E_AGENT_HOOKS name prebuilt binaries (with all
// three, no Go toolchain is needed: `go test -c` once, run the binary
// anywhere). Agent tests fail, not skip, if the agent does not build.
//
// Environment:
//
//	VPNC_E2E_BACKEND    backend for the leak matrix and fault suite's agent
//	                    configs (default "auto": kernel WireGuard when the
//	                    module exists, userspace otherwise)
//	VPNC_MATRIX_REPORT  file to write the leak-matrix report to (the
//	                    fault-suite summary, the container matrix's table
//	                    and line, the table, and the closing "leak
//	                    matrix: ..." line); `go test ./...` hides the
//	                    stdout of passing packages
package e2e

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

var (
	agentFlag    = flag.String("agent", os.Getenv("VPN_E2E_AGENT"), "use this vpn-agent binary instead of building agent/cmd/vpn-agent")
	providerFlag = flag.String("provider", os.Getenv("VPN_E2E_PROVIDER"), "use this provider binary instead of building tests/cmd/provider")
	hooksFlag    = flag.String("agent-hooks", os.Getenv("VPN_E2E_AGENT_HOOKS"), "use this vpn-agent binary, built with -tags "+hooksTag+", for the fault suite instead of building one")
)

// hooksTag is the build tag that compiles the agent's fault-injection hooks
// in (agent/cli/faults_testhooks.go); `vpn-agent version` then says so.
const (
	hooksTag  = "vpnagent_testhooks"
	hooksNote = "(test hooks)"
)

// e2eBackend is the backend the leak matrix and the fault suite configure:
// $VPNC_E2E_BACKEND, default "auto" (the config's own default).
func e2eBackend() string {
	if b := os.Getenv("VPNC_E2E_BACKEND"); b != "" {
		return b
	}
	return "auto"
}

var env struct {
	skip        string // why every test skips; "" to run
	providerBin string
	providerErr error
	agentBin    string
	agentErr    error
	hooksBin    string // vpn-agent with the fault-injection hooks
	hooksErr    error
	probeBin    string // tests/cmd/sandboxprobe (in a directory every user can reach)
	probeErr    error
	netprobeBin string // tests/cmd/netprobe, static (the container matrix copies it into its containers' roots)
	netprobeErr error
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(appProbeEnv); spec != "" {
		os.Exit(appProbeMain(spec)) // the sidecar test's app (sidecar_test.go)
	}
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if env.skip = checkEnv(); env.skip != "" {
		fmt.Fprintln(os.Stderr, "e2e: skipping all tests:", env.skip)
		return m.Run()
	}
	if removed, err := harness.Sweep(); len(removed) > 0 || err != nil {
		fmt.Fprintf(os.Stderr, "e2e: swept leftovers of earlier runs: %v (errors: %v)\n", removed, err)
	}
	dir, err := os.MkdirTemp("", "vpn-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The sandbox probes run as nobody: the directory must be searchable.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	buildAll(dir)
	before := podmanCgroups()
	code := m.Run()
	// After every test, so no container of a running test can be hit.
	if left := removePodmanCgroups(before); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: podman cgroups left that could not be removed:", left)
		code = 1
	}
	if err := writeReport(os.Getenv("VPNC_MATRIX_REPORT")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: writing $VPNC_MATRIX_REPORT:", err)
		if code == 0 {
			code = 1
		}
	}
	// Every topology cleans up after itself; whatever a sweep still finds
	// was leaked by this run (or a crashed one).
	if removed, err := harness.Sweep(); len(removed) > 0 || err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: resources left behind after the run (now removed): %v (errors: %v)\n", removed, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func checkEnv() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, nftables, TUN)"
	}
	var missing []string
	for _, tool := range []string{"ip", "nft", "sysctl", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		missing = append(missing, "/dev/net/tun")
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ")
	}
	return ""
}

// buildAll builds the provider and the agent concurrently into dir, unless
// flags name prebuilt ones.
func buildAll(dir string) {
	var wg sync.WaitGroup
	for _, b := range []struct {
		flag, prebuilt, name, pkg string
		bin                       *string
		err                       *error
	}{
		{"-provider", *providerFlag, "provider", "./tests/cmd/provider", &env.providerBin, &env.providerErr},
		{"-agent", *agentFlag, "vpn-agent", "./agent/cmd/vpn-agent", &env.agentBin, &env.agentErr},
	} {
		if b.prebuilt != "" {
			*b.bin = b.prebuilt
			if _, err := os.Stat(b.prebuilt); err != nil {
				*b.err = fmt.Errorf("%s: %w", b.flag, err)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			*b.bin, *b.err = goBuild(dir, b.name, b.pkg)
		}()
	}
	if *hooksFlag != "" {
		env.hooksBin = *hooksFlag
		env.hooksErr = checkHooks(env.hooksBin)
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Its own directory: the binary is called vpn-agent too, as
			// the tests find agent processes by name.
			hdir := filepath.Join(dir, "testhooks")
			if env.hooksErr = os.Mkdir(hdir, 0o755); env.hooksErr != nil {
				return
			}
			env.hooksBin, env.hooksErr = goBuild(hdir, "vpn-agent", "./agent/cmd/vpn-agent", "-tags", hooksTag)
			if env.hooksErr == nil {
				env.hooksErr = checkHooks(env.hooksBin)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		env.probeBin, env.probeErr = goBuild(dir, "sandboxprobe", "./tests/cmd/sandboxprobe")
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		env.netprobeBin, env.netprobeErr = goBuildEnv([]string{"CGO_ENABLED=0"}, dir, "netprobe", "./tests/cmd/netprobe")
		if env.netprobeErr == nil {
			env.netprobeErr = isStatic(env.netprobeBin)
		}
	}()
	wg.Wait()
}

// checkHooks fails unless bin is a vpn-agent built with the hooks.
func checkHooks(bin string) error {
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s version: %w: %s", bin, err, out)
	}
	if !strings.Contains(string(out), hooksNote) {
		return fmt.Errorf("%s has no fault-injection hooks (`version` says %q); build it with -tags %s", bin, strings.TrimSpace(string(out)), hooksTag)
	}
	return nil
}

func goBuild(dir, name, pkg string, flags ...string) (string, error) {
	return goBuildEnv(nil, dir, name, pkg, flags...)
}

// goBuildEnv is goBuild with environ (NAME=value) added to go's.
func goBuildEnv(environ []string, dir, name, pkg string, flags ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(gobin, append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	cmd.Dir = root
	if environ != nil {
		cmd.Env = append(os.Environ(), environ...)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// errNoSource: the test binary runs without the source tree (prebuilt, as
// in the VM tier), so nothing can be built from it.
var errNoSource = errors.New("go.mod not found above the test directory")

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNoSource
		}
		dir = parent
	}
}

// requireEnv skips when the machine cannot run the suite, and fails when
// the provider did not build.
func requireEnv(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	if env.providerErr != nil {
		t.Fatalf("provider helper: %v", env.providerErr)
	}
}

// requireAgent is requireEnv plus a usable vpn-agent (failing otherwise).
func requireAgent(t *testing.T) {
	t.Helper()
	requireEnv(t)
	if env.agentErr != nil {
		t.Fatalf("vpn-agent is not usable: %v", env.agentErr)
	}
}

// requireHooks is requireAgent plus a vpn-agent with the fault-injection
// hooks (failing otherwise).
func requireHooks(t *testing.T) {
	t.Helper()
	requireAgent(t)
	if env.hooksErr != nil {
		t.Fatalf("vpn-agent with test hooks is not usable: %v", env.hooksErr)
	}
}

// requireProbe is requireAgent plus tests/cmd/sandboxprobe (failing
// otherwise).
func requireProbe(t *testing.T) {
	t.Helper()
	requireAgent(t)
	if env.probeErr != nil {
		t.Fatalf("sandboxprobe: %v", env.probeErr)
	}
}

// newTopo builds a topology with the provider running.
func newTopo(t *testing.T) *harness.Topo {
	t.Helper()
	return harness.New(t, harness.Options{ProviderBin: env.providerBin})
}
