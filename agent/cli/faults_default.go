//go:build !vpnagent_testhooks

package cli

// buildNote is empty in a production build (see faults_testhooks.go).
const buildNote = ""

// faultHook is nil in a production build: the fault-injection hooks exist
// only with -tags vpnagent_testhooks (faults_testhooks.go), whatever the
// environment says.
func faultHook() func(string) error { return nil }
