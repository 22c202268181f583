package unit

import (
	"slices"
	"strings"
	"testing"
)

func TestPodmanFlags(t *testing.T) {
	got := PodmanFlags("proton")
	want := []string{
		"--network=ns:/run/netns/proton",
		"--volume=/etc/netns/proton/resolv.conf:/etc/resolv.conf:ro",
		"--volume=/etc/netns/proton/nsswitch.conf:/etc/nsswitch.conf:ro",
		"--volume=/etc/netns/proton/resolv.conf:/run/systemd/resolve/stub-resolv.conf:ro",
		"--volume=/etc/netns/proton/resolv.conf:/run/systemd/resolve/resolv.conf:ro",
		"--tmpfs=/run/nscd:ro,mode=0755",
		"--tmpfs=/run/systemd/resolve:ro,mode=0755",
		"--tmpfs=/run/dbus:ro,mode=0755",
		"--tmpfs=/var/run/wireguard:ro,mode=0755",
		"--cap-drop=NET_ADMIN",
		"--cap-drop=NET_RAW",
	}
	if !slices.Equal(got, want) {
		t.Errorf("PodmanFlags(proton) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range Podman() {
		if f.Why == "" {
			t.Errorf("%s has no Why", f.Flag)
		}
		// One word each: `podman run $(vpn-agent podman-flags NAME)`.
		if strings.ContainsAny(f.Flag, " \t\n") || !strings.HasPrefix(f.Flag, "--") {
			t.Errorf("%q is not one --flag=value word", f.Flag)
		}
	}
}

// The container's unit takes the confined service's dependencies on the
// agent, and nothing of its [Service] (the unit runs podman itself).
func TestContainerUnit(t *testing.T) {
	u := Container()
	if len(u) != 1 || u[0].Name != "Unit" {
		t.Fatalf("Container() = %+v, want one [Unit] section", u)
	}
	got := Render(u, Vars{"agent": "vpn-agent@proton.service"}, false)
	for _, k := range []string{"BindsTo", "After", "PartOf"} {
		if !strings.Contains(got, k+"=vpn-agent@proton.service\n") {
			t.Errorf("container unit lacks %s=vpn-agent@proton.service:\n%s", k, got)
		}
	}
}

func TestContainerDropIn(t *testing.T) {
	got := ContainerDropIn("proton", "vpn-agent@proton.service")
	for _, want := range []string{"[Unit]\n", "\nBindsTo=vpn-agent@proton.service\n", "\nAfter=vpn-agent@proton.service\n", "\nPartOf=vpn-agent@proton.service\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("container drop-in lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "[Service]") || strings.Contains(got, "NetworkNamespacePath") {
		t.Errorf("container drop-in confines podman itself:\n%s", got)
	}
}
