// The programs the bench measures: the agent binary and the stock
// wireguard-go references, each recorded with where it came from and its
// version.

package bench

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// wgModule is the module of the embedded data plane and, built as a
// program, of stock wireguard-go.
const wgModule = "golang.zx2c4.com/wireguard"

// ReferenceSibling is the reference binary's name next to vpn-bench: the
// Nix package builds it from the vendored module (go.mod's tool
// directive), at the version the agent embeds.
const ReferenceSibling = "vpn-bench-wireguard-go"

// Binary is one program the bench runs as a process of its own.
type Binary struct {
	Path string `json:"path"`
	// Source says how the bench found it.
	Source string `json:"source"`
	// Module is the wireguard-go module version the program was built
	// from (its build info), "" when it has none.
	Module string `json:"wireguardModule,omitempty"`
	// Version is the program's own --version line.
	Version string `json:"version,omitempty"`
}

// Label is the binary as the summary and the chart name it.
func (b *Binary) Label() string {
	if b == nil {
		return ""
	}
	v := b.Version
	if v == "" {
		v = filepath.Base(b.Path)
	}
	if b.Module != "" {
		v += " (module " + b.Module + ")"
	}
	return v
}

// embeddedWG is the wireguard-go module version linked into this binary:
// the agent's embedded data plane when the bench re-executes itself as
// the agent, and the version an external agent of the same build embeds.
// A test binary carries no module versions; then it is go.mod's (`go
// list -m` in the module the test runs in, which built the binary).
func embeddedWG() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == wgModule {
				if d.Replace != nil {
					return d.Replace.Path + " " + d.Replace.Version
				}
				return d.Version
			}
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", wgModule).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// wgModuleOf reads which wireguard-go module version path was built from:
// its main module (stock wireguard-go) or a dependency (the agent).
func wgModuleOf(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	if bi.Main.Path == wgModule && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == wgModule {
			return d.Version
		}
	}
	return ""
}

// stockBinary describes a stock wireguard-go binary.
func stockBinary(path, source string) *Binary {
	c := exec.Command(path, "--version")
	c.Env = append(os.Environ(), stockEnv)
	return &Binary{Path: path, Source: source, Module: wgModuleOf(path), Version: firstLine(c)}
}

// findReferences resolves the two reference modes' binaries. reference
// is stock wireguard-go of exactly the module version the agent embeds
// (want):
// the path given (--reference-bin), else ReferenceSibling next to the
// running executable, else a wireguard-go on PATH built from that
// version, else one built now from go.mod's module (`go build
// golang.zx2c4.com/wireguard` in the module the working directory is
// in). system is the wireguard-go on PATH when it is another version
// (e.g. Debian's). why says why reference is missing. A binary whose
// build info names another module version is never the reference.
func findReferences(want, given, workDir string) (ref, system *Binary, why string) {
	onPath, _ := exec.LookPath("wireguard-go")
	if onPath != "" {
		system = stockBinary(onPath, "wireguard-go on PATH")
	}
	same := func(b *Binary) bool { return want != "" && b.Module == want }
	if given != "" {
		b := stockBinary(given, "--reference-bin")
		if !same(b) {
			return nil, system, fmt.Sprintf("%s was built from wireguard-go %q, not the embedded %q", given, b.Module, want)
		}
		return b, system, ""
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), ReferenceSibling)
		if _, err := os.Stat(p); err == nil {
			if b := stockBinary(p, "next to vpn-bench (built from the vendored module)"); same(b) {
				return b, system, ""
			}
		}
	}
	if system != nil && same(system) {
		system.Source += " (the embedded module version)"
		return system, nil, ""
	}
	b, err := buildReference(workDir)
	if err != nil {
		return nil, system, err.Error()
	}
	if !same(b) {
		return nil, system, fmt.Sprintf("the wireguard-go built from this module is %q, not the embedded %q", b.Module, want)
	}
	return b, system, ""
}

// buildReference builds stock wireguard-go from the module the working
// directory is in (this project's go.mod pins the version the agent
// embeds) into dir.
func buildReference(dir string) (*Binary, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("no %s next to vpn-bench, no same-version wireguard-go on PATH, and no go to build one (give --reference-bin)", ReferenceSibling)
	}
	out := filepath.Join(dir, "wireguard-go")
	cmd := exec.Command(gobin, "build", "-trimpath", "-o", out, wgModule)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the reference (go build %s, in this project's module): %v: %s", wgModule, err, strings.Join(strings.Fields(string(msg)), " "))
	}
	return stockBinary(out, "built by vpn-bench: go build "+wgModule+" (go.mod's version)"), nil
}

// findAgent resolves the vpn-agent binary the tunnel modes run: the path
// given (--agent-bin), else vpn-agent next to the running executable,
// else on PATH, else the bench itself re-executed as the agent's command
// line (agent/cli: vpn-agent's code, linked into vpn-bench).
func findAgent(given string) *Binary {
	if given != "" {
		return agentBinary(given, "--agent-bin")
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "vpn-agent")
		if _, err := os.Stat(p); err == nil && p != exe {
			return agentBinary(p, "next to vpn-bench")
		}
	}
	if p, err := exec.LookPath("vpn-agent"); err == nil {
		return agentBinary(p, "vpn-agent on PATH")
	}
	return &Binary{Path: "/proc/self/exe", Source: selfAgent, Module: embeddedWG()}
}

// selfAgent is the Source of the agent when the bench re-executes itself.
const selfAgent = "vpn-bench re-executed as vpn-agent's command line (agent/cli)"

func agentBinary(path, source string) *Binary {
	return &Binary{Path: path, Source: source, Module: wgModuleOf(path), Version: firstLine(exec.Command(path, "--version"))}
}
