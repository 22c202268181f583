package testbed

import "testing"

func TestIDOf(t *testing.T) {
	for name, want := range map[string]string{
		"vt1a2b3c":           "vt1a2b3c", // owner file
		"vt1a2b3ch":          "vt1a2b3c", // namespace
		"vc-vt1a2b3cc":       "vt1a2b3c", // agent link
		"vh-vt1a2b3cc":       "vt1a2b3c", // agent host link
		"vc-vt1a2b3cc.sock":  "vt1a2b3c", // agent UAPI socket
		"vt1a2b3cw.sock":     "vt1a2b3c", // provider UAPI socket
		"vt1a2b3cc.lock":     "vt1a2b3c", // agent lock
		"vt1a2b3":            "",         // too short
		"vt1a2b3cxy":         "",         // two role letters
		"demo":               "",
		"vcpt-probe":         "",
		"xvt1a2b3c":          "",
		"vt1A2B3Cc":          "",
		"wgp31280.sock":      "",
		"vc-vt1a2b3cc.sockx": "",
		"vb1a2b3cc":          "",         // another prefix
		"vt1a2b3ce12":        "vt1a2b3c", // a numbered cycle
		"vt1a2b3ce12345":     "",
	} {
		if got := IDOf("vt", name); got != want {
			t.Errorf("IDOf(vt, %q) = %q, want %q", name, got, want)
		}
	}
}
