//go:build !linux

package policy

import (
	"errors"
	"fmt"
)

// Compile, CompileHost and Render work everywhere (for review and tests);
// loading and reading tables needs Linux.

// Apply is only supported on Linux.
func Apply(r *Ruleset, nsPath string) error {
	return fmt.Errorf("apply table %s %q: %w", r.Family, r.Name, errors.ErrUnsupported)
}

// Create is only supported on Linux.
func Create(r *Ruleset, nsPath string) error {
	return fmt.Errorf("create table %s %q: %w", r.Family, r.Name, errors.ErrUnsupported)
}

// Remove is only supported on Linux.
func Remove(nsPath, name string) error {
	return fmt.Errorf("remove table %s %q: %w", FamilyINet, name, errors.ErrUnsupported)
}

// Inspect is only supported on Linux.
func Inspect(nsPath, name string) (*State, error) {
	return nil, fmt.Errorf("inspect table %s %q: %w", FamilyINet, name, errors.ErrUnsupported)
}

// Verify is only supported on Linux.
func (s *State) Verify(want *Ruleset) error {
	return fmt.Errorf("verify table %q: %w", want.Name, errors.ErrUnsupported)
}

// Fingerprint is only supported on Linux.
func (r *Ruleset) Fingerprint() string { return "" }

// SelfAgentSocket is only supported on Linux.
func SelfAgentSocket() (AgentSocket, error) {
	return AgentSocket{}, fmt.Errorf("agent cgroup: %w", errors.ErrUnsupported)
}

// AgentSocketOf is only supported on Linux.
func AgentSocketOf(pid int) (AgentSocket, error) {
	return AgentSocket{}, fmt.Errorf("agent cgroup: %w", errors.ErrUnsupported)
}
