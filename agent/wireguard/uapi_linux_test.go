package wireguard

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Root in the host namespace may use the UAPI socket; root without
// CAP_NET_ADMIN, or in another network namespace, may not.
func TestUAPIGuard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	g, err := newUAPIGuard()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		want string // "": allowed (the positive control: root in the host namespace)
	}{
		{[]string{"sleep", "10"}, ""},
		{[]string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "sleep", "10"}, "lacks CAP_NET_ADMIN"},
		{[]string{"unshare", "--net", "sleep", "10"}, "another network namespace"},
		{[]string{"unshare", "--user", "--map-root-user", "sleep", "10"}, "another user namespace"},
	} {
		cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("%v: %v", tc.argv, err)
		}
		// Wait until the wrapper has exec'd sleep, in its new state.
		deadline := time.Now().Add(3 * time.Second)
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
			if strings.TrimSpace(string(b)) == "sleep" || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		err := g.allowPID(cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Wait()
		if tc.want == "" {
			if err != nil {
				t.Errorf("positive control %v refused: %v", tc.argv, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.argv, err, tc.want)
		}
	}
}
