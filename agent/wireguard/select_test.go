package wireguard

import (
	"errors"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

func TestSelect(t *testing.T) {
	noKernel := ErrNoKernel
	for _, tc := range []struct {
		want    config.Backend
		kernel  error
		got     config.Backend
		wantErr bool
	}{
		{config.BackendAuto, nil, config.BackendKernel, false},
		{config.BackendAuto, noKernel, config.BackendUserspace, false},
		{"", noKernel, config.BackendUserspace, false},
		{config.BackendKernel, nil, config.BackendKernel, false},
		{config.BackendKernel, noKernel, "", true},
		{config.BackendUserspace, nil, config.BackendUserspace, false},
		{config.BackendUserspace, noKernel, config.BackendUserspace, false},
		{"bogus", nil, "", true},
	} {
		got, err := Select(tc.want, tc.kernel)
		if (err != nil) != tc.wantErr || got != tc.got {
			t.Errorf("Select(%q, %v) = %q, %v; want %q, err=%v", tc.want, tc.kernel, got, err, tc.got, tc.wantErr)
		}
	}
}

func TestProbeKernelOnThisHost(t *testing.T) {
	// Whatever the host has, the probe must answer without leaving a link.
	err := ProbeKernel()
	if err != nil && !errors.Is(err, ErrNoKernel) {
		t.Logf("probe error (not a missing module): %v", err)
	}
	t.Logf("kernel WireGuard available: %v", err == nil)
}
