package apps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

func TestCommandEnvironment(t *testing.T) {
	var gotArgv, gotEnv []string
	var deadline time.Time
	run := func(ctx context.Context, argv, env []string) ([]byte, error) {
		gotArgv, gotEnv = argv, env
		deadline, _ = ctx.Deadline()
		return nil, nil
	}
	argv := []string{"/usr/local/bin/port-changed", "--flag"}
	p := NewCommand(argv, run)
	argv[1] = "changed" // NewCommand keeps its own copy
	if p.Name() != "onChange" {
		t.Fatalf("name %q", p.Name())
	}
	start := time.Now()
	if err := p.Push(context.Background(), 41001, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/local/bin/port-changed", "--flag"}; !slices.Equal(gotArgv, want) {
		t.Fatalf("argv %q, want %q", gotArgv, want)
	}
	want := []string{"PATH=" + commandPath, "VPN_FORWARDED_PORT=41001", "VPN_FORWARDED_PROTOCOLS=tcp,udp"}
	if !slices.Equal(gotEnv, want) {
		t.Fatalf("env %q, want %q", gotEnv, want)
	}
	if d := deadline.Sub(start); d <= 0 || d > CommandTimeout+time.Second {
		t.Fatalf("run's deadline in %v, want about %v", d, CommandTimeout)
	}
	// The port lost: VPN_FORWARDED_PORT is empty.
	if err := p.Push(context.Background(), 0, []string{"tcp", "udp"}); err != nil {
		t.Fatal(err)
	}
	if want[1] = "VPN_FORWARDED_PORT="; !slices.Equal(gotEnv, want) {
		t.Fatalf("env for a lost port %q, want %q", gotEnv, want)
	}
	fail := func(context.Context, []string, []string) ([]byte, error) {
		return nil, &CommandError{Code: 3, Output: []byte("boom\nline two")}
	}
	err := NewCommand(argv, fail).Push(context.Background(), 41001, nil)
	var ce *CommandError
	if !errors.As(err, &ce) || err.Error() != "onChange /usr/local/bin/port-changed (VPN_FORWARDED_PORT=41001): exit code 3: output: boom line two" {
		t.Fatalf("failure: %v", err)
	}
}

// A run that worked is reported for the log the way a failure is: exit
// code 0 and the start of the output on one line, bounded.
func TestCommandReport(t *testing.T) {
	out := []byte("port set\n\tto 41001\r\n")
	run := func(context.Context, []string, []string) ([]byte, error) { return out, nil }
	r, ok := NewCommand([]string{"/usr/local/bin/port-changed"}, run).(portforward.Reporter)
	if !ok {
		t.Fatal("the command is no portforward.Reporter: the manager would not log how its runs ended")
	}
	said, err := r.PushReport(context.Background(), 41001, []string{"tcp"})
	if want := "exit code 0: output: port set to 41001"; err != nil || said != want {
		t.Fatalf("report %q (%v), want %q", said, err, want)
	}
	out = nil
	if said, _ = r.PushReport(context.Background(), 0, nil); said != "exit code 0" {
		t.Fatalf("report without output %q", said)
	}
	out = []byte(strings.Repeat("x", MaxOutput))
	want := "exit code 0: output: " + strings.Repeat("x", excerptLen) + "..."
	if said, _ = r.PushReport(context.Background(), 41001, nil); said != want {
		t.Fatalf("report of %d bytes of output: %d bytes %q", len(out), len(said), said)
	}
}

// TestRunGroup runs real processes (a shell, as tests may): exit codes,
// bounded output, and a timeout that kills the whole process group.
func TestRunGroup(t *testing.T) {
	ctx := context.Background()
	if out, err := runGroup(ctx, "/bin/sh", []string{"-c", "echo hi; echo there >&2"}, nil); err != nil || string(out) != "hi\nthere\n" {
		t.Fatalf("exit 0: %q %v", out, err)
	}
	_, err := runGroup(ctx, "/bin/sh", []string{"-c", "echo boom; echo on stderr >&2; exit 3"}, nil)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Code != 3 || string(ce.Output) != "boom\non stderr\n" || err.Error() != "exit code 3: output: boom on stderr" {
		t.Fatalf("exit 3: %#v %v", ce, err)
	}
	if out, err := runGroup(ctx, "/bin/sh", []string{"-c", "head -c 100000 /dev/zero | tr '\\0' x"}, nil); err != nil || len(out) != MaxOutput {
		t.Fatalf("100 KB of output, exit 0: kept %d bytes (%v)", len(out), err)
	}
	_, err = runGroup(ctx, "/bin/sh", []string{"-c", "head -c 100000 /dev/zero | tr '\\0' x; exit 1"}, nil)
	if !errors.As(err, &ce) || len(ce.Output) != MaxOutput || !ce.Truncated || len(err.Error()) > 200 {
		t.Fatalf("100 KB of output: kept %d bytes (truncated %v), error %d bytes", len(ce.Output), ce.Truncated, len(err.Error()))
	}
	checkKilledAtTimeout(t, func(ctx context.Context, argv, env []string) ([]byte, error) {
		return runGroup(ctx, argv[0], argv[1:], env)
	})
}

// checkKilledAtTimeout runs, through run, a shell with a background
// child holding the output and a foreground sleep: the timeout kills
// both, and run returns within the timeout and waitDelay.
func checkKilledAtTimeout(t *testing.T, run RunFunc) {
	t.Helper()
	const timeout = 1500 * time.Millisecond
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		script := `sleep 30 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"; echo started; sleep 30`
		_, err := run(ctx, []string{"/bin/sh", "-c", script, pidFile}, nil)
		done <- err
	}()
	var bg int
	for bg == 0 && time.Since(start) < timeout {
		b, _ := os.ReadFile(pidFile)
		bg, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(10 * time.Millisecond)
	}
	if !alive(bg) {
		t.Fatalf("the background child (pid %d) is not running before the timeout", bg)
	}
	err := <-done
	if took := time.Since(start); took > timeout+waitDelay {
		t.Fatalf("a %v timeout returned after %v", timeout, took)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || !ce.TimedOut || !strings.HasPrefix(err.Error(), "did not finish in time") || string(ce.Output) != "started\n" {
		t.Fatalf("timeout: %#v %v", ce, err)
	}
	for i := 0; alive(bg); i++ {
		if i == 100 {
			t.Fatalf("the background child (pid %d) outlived the timeout", bg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive: pid runs (a zombie has ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil || pid <= 0 {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}
