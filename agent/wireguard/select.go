// Package wireguard creates the tunnel interface with the birthplace trick:
// the interface (and so its encrypted UDP socket) is created in the agent's
// own namespace, then the interface is moved into the confined namespace.
// Two backends exist: the kernel module (netlink + wgctrl) and embedded
// userspace WireGuard (golang.zx2c4.com/wireguard).
package wireguard

import (
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// ErrNoKernel means the kernel has no WireGuard support.
var ErrNoKernel = errors.New("kernel has no WireGuard support (module missing)")

// Select resolves the configured backend. kernelErr is the outcome of
// probing the kernel (nil: available). auto prefers the kernel; an explicit
// kernel request fails if the kernel lacks WireGuard.
func Select(want config.Backend, kernelErr error) (config.Backend, error) {
	switch want {
	case config.BackendUserspace:
		return config.BackendUserspace, nil
	case config.BackendKernel:
		if kernelErr != nil {
			return "", &config.FieldError{Field: "backend", Msg: fmt.Sprintf("kernel requested but unavailable (%v)", kernelErr), Fix: `load the wireguard module or set "backend": "auto"`}
		}
		return config.BackendKernel, nil
	case config.BackendAuto, "":
		if kernelErr == nil {
			return config.BackendKernel, nil
		}
		return config.BackendUserspace, nil
	}
	return "", fmt.Errorf("backend: unknown backend %q", want)
}
