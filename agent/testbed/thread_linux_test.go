package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// A child started with Pdeathsig survives goroutines that exit locked to
// their thread (as netns.Create's does): Start keeps the forking thread
// out of the scheduler until the child exits.
func TestStartChildSurvivesLockedThreadExits(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	name := fmt.Sprintf("tbpd%d", os.Getpid())
	if err := netns.Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(name) })
	var children []*exec.Cmd
	for range 8 {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := Start(name, cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		children = append(children, cmd)
	}
	// Many goroutines that end locked: each ends whatever thread it ran on.
	for range 200 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
		}()
		<-done
	}
	time.Sleep(200 * time.Millisecond)
	for i, c := range children {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("child %d died (Pdeathsig from an ended thread): %v", i, err)
		}
		var st syscall.WaitStatus
		if pid, _ := syscall.Wait4(c.Process.Pid, &st, syscall.WNOHANG, nil); pid != 0 {
			t.Fatalf("child %d exited: %v", i, st)
		}
	}
}
