// Package docs checks the project's Markdown: every relative link points at
// a file that exists, and every #anchor at a heading of that file.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, two levels up from this package.
const root = "../.."

// docFiles are the Markdown files whose links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	return files
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile("(?m)^#{1,6} +(.+?) *$")
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is GitHub's anchor for a heading: lower case, every character but
// letters, numbers, marks, '-' and '_' dropped, spaces made '-'.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the heading anchors of a Markdown file (code blocks skipped),
// with GitHub's -1, -2 suffixes for repeats.
func anchors(text string) map[string]bool {
	text = fenceRE.ReplaceAllString(text, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(text, -1) {
		h := strings.ReplaceAll(m[1], "`", "")
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"5. Reach the web UI from the host and the LAN":             "5-reach-the-web-ui-from-the-host-and-the-lan",
		"Port forwarding (ProtonVPN NAT-PMP)":                       "port-forwarding-protonvpn-nat-pmp",
		"What vpn-agent exec isolates":                              "what-vpn-agent-exec-isolates",
		"Results: the agent as users run it (issue 15, 2026-12-01)": "results-the-agent-as-users-run-it-issue-15-2026-12-01",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinks: every relative link of the README and docs/ resolves, anchors
// included. A moved section or renamed heading breaks it.
func TestLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	checked := 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(b), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
			}
			checked++
			st, err := os.Stat(filepath.Join(root, file))
			if err != nil {
				t.Errorf("%s: link %q: %s does not exist", f, target, file)
				continue
			}
			if frag == "" || st.IsDir() {
				continue
			}
			a, ok := cache[file]
			if !ok {
				tb, err := os.ReadFile(filepath.Join(root, file))
				if err != nil {
					t.Fatal(err)
				}
				a = anchors(string(tb))
				cache[file] = a
			}
			if !a[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", f, target, file, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links checked: the link pattern no longer matches the docs", checked)
	}
}
