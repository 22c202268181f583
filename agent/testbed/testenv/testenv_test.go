package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// skipRecorder is a testing.TB whose Skip ends only the goroutine of the
// helper under test and records the message.
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Helper() {}

func (r *skipRecorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *skipRecorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// skipped runs fn with a recorder and returns its skip message ("" when
// fn did not skip).
func skipped(t *testing.T, fn func(testing.TB)) string {
	r := &skipRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.skipped
}

func TestNeedRoot(t *testing.T) {
	msg := skipped(t, func(tb testing.TB) { NeedRoot(tb, "network namespaces") })
	if root := os.Geteuid() == 0; root != (msg == "") {
		t.Errorf("root %v: skip message %q", root, msg)
	}
	if msg != "" && msg != "needs root (network namespaces)" {
		t.Errorf("skip message %q", msg)
	}
}

func TestNeedTools(t *testing.T) {
	// The test binary itself is a program that exists (a path: no PATH
	// search), so this must not skip.
	if msg := skipped(t, func(tb testing.TB) { NeedTools(tb, os.Args[0]) }); msg != "" {
		t.Errorf("present tool: skipped: %q", msg)
	}
	msg := skipped(t, func(tb testing.TB) { NeedTools(tb, os.Args[0], "testenv-no-such-tool") })
	if !strings.HasPrefix(msg, "needs testenv-no-such-tool: ") {
		t.Errorf("missing tool: skip message %q", msg)
	}
}

func TestGoTool(t *testing.T) {
	var gobin string
	if msg := skipped(t, func(tb testing.TB) { gobin = GoTool(tb) }); msg != "" {
		t.Skip(msg)
	}
	if st, err := os.Stat(gobin); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("GoTool() = %q: %v", gobin, err)
	}
}
