package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// forbiddenTools are programs the production agent must never run: it
// talks netlink and nftables itself. The bench (vpn-bench) and the tests
// may.
var forbiddenTools = []string{"ip", "nft", "wg", "tc", "sh", "bash"}

// allowedTools are the only programs the production binary's own code
// names in exec.Command, exec.CommandContext or exec.LookPath, and why.
var allowedTools = map[string]string{
	"nsenter": "vpn-agent demo: the local provider runs the demo's command in the simulated host's network namespace",
}

// pkg is one package of vpn-agent's import closure that is in this module.
type pkg struct {
	ImportPath, Dir string
	GoFiles         []string
}

// closure lists vpn-agent's module-local packages as `go build` (no tags)
// sees them, skipping the test when there is no Go toolchain.
func closure(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command(testenv.GoTool(t), "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .GoFiles ","}}{{end}}{{end}}`, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=") // the default build, whatever the caller's flags
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var pkgs []pkg
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, pkg{ImportPath: f[0], Dir: f[1], GoFiles: strings.Split(f[2], ",")})
	}
	if len(pkgs) < 2 {
		t.Fatalf("go list found only %v", pkgs)
	}
	return pkgs
}

// modulePath is the module's import path, from the main package's path.
const modulePath = "github.com/vpn-confinement/vpn-confinement"

// TestClosureHasNoBenchOrFixtures: vpn-agent links none of the module's
// bench, fixture or test-environment packages.
func TestClosureHasNoBenchOrFixtures(t *testing.T) {
	for _, p := range closure(t) {
		rel := "/" + strings.TrimPrefix(p.ImportPath, modulePath+"/")
		if strings.Contains(rel, "/bench") || strings.Contains(rel, "/fixture") || strings.Contains(rel, "/testenv") {
			t.Errorf("vpn-agent imports %s", p.ImportPath)
		}
	}
}

// TestClosureHasNoTesting: no package vpn-agent links, the standard
// library's included, imports package testing (test helpers such as
// testbed/testenv and the fixtures do).
func TestClosureHasNoTesting(t *testing.T) {
	cmd := exec.Command(testenv.GoTool(t), "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "os") {
		t.Fatalf("go list -deps found only %v", deps) // positive control: the list is real
	}
	if slices.Contains(deps, "testing") {
		t.Error("vpn-agent links package testing: some production package imports a test helper")
	}
}

// TestClosureRunsNoNetworkTools parses the production code of every
// module package vpn-agent links (test files and other build tags
// excluded) and fails on an exec of ip, nft, wg, tc or a shell, or of any
// program not in allowedTools; and on the fault-injection hooks' variables.
func TestClosureRunsNoNetworkTools(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range closure(t) {
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), "VPN_AGENT_TEST_HOOKS") {
				t.Errorf("%s: the fault-injection hooks are in the production build", path)
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range execCalls(f) {
				pos := fset.Position(c.pos)
				switch {
				case c.tool == "":
					t.Logf("%s: %s of a computed program (not checked)", pos, c.fn)
				case slices.Contains(forbiddenTools, c.tool):
					t.Errorf("%s: %s(%q): the production agent must not run %s", pos, c.fn, c.tool, c.tool)
				case allowedTools[c.tool] == "":
					t.Errorf("%s: %s(%q): not in allowedTools", pos, c.fn, c.tool)
				default:
					t.Logf("%s: %s(%q) allowed: %s", pos, c.fn, c.tool, allowedTools[c.tool])
				}
			}
		}
	}
}

// execCall is a call of os/exec's Command, CommandContext or LookPath;
// tool is the program's base name when it is a string literal.
type execCall struct {
	pos  token.Pos
	fn   string
	tool string
}

func execCalls(f *ast.File) []execCall {
	local := "" // the file's name for os/exec
	for _, imp := range f.Imports {
		if imp.Path.Value == `"os/exec"` {
			local = "exec"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return nil
	}
	var calls []execCall
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != local {
			return true
		}
		arg := 0
		switch sel.Sel.Name {
		case "Command", "LookPath":
		case "CommandContext":
			arg = 1
		default:
			return true
		}
		c := execCall{pos: call.Pos(), fn: local + "." + sel.Sel.Name}
		if len(call.Args) > arg {
			if lit, ok := call.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					c.tool = filepath.Base(s)
				}
			}
		}
		calls = append(calls, c)
		return true
	})
	return calls
}
