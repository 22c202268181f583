package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// The state file's digests notice a changed key but are computed from no
// secret as it is: the private key's part is its public key's digest.
func TestDigestsHoldNoSecret(t *testing.T) {
	s := testSpec(false)
	k, _ := wgtypes.GeneratePrivateKey()
	psk, _ := wgtypes.GenerateKey()
	s.PrivateKey = k
	s.Peers[0].PresharedKey = &psk
	d := Digests(s)
	raw := sha256.Sum256([]byte(fmt.Sprintf("%v", k[:])))
	pub := sha256.Sum256([]byte(fmt.Sprintf("%v", k.PublicKey().String())))
	if d["privateKey"] == hex.EncodeToString(raw[:8]) || d["privateKey"] != hex.EncodeToString(pub[:8]) {
		t.Errorf("privateKey digest %s is not the public key's", d["privateKey"])
	}
	psk2, _ := wgtypes.GenerateKey()
	s.Peers[0].PresharedKey = &psk2
	if Digests(s)["peers"] == d["peers"] {
		t.Error("a changed preshared key went unnoticed")
	}
	k2, _ := wgtypes.GeneratePrivateKey()
	s.PrivateKey = k2
	if Digests(s)["privateKey"] == d["privateKey"] {
		t.Error("a changed private key went unnoticed")
	}
}

// A changed port-forwarding application user is a change (a restart
// pushes with the new owner check); the credentials stay out of it.
func TestDigestPortForwardUser(t *testing.T) {
	s := testSpec(false)
	app := &config.AppSpec{URL: "http://127.0.0.1:9091/transmission/rpc", CredentialsFile: "/run/secrets/tr", User: "alice", Password: "s3cret", RunsAs: "debian-transmission", UID: 101}
	s.PortForward = &config.PortForwardSpec{Transmission: app}
	d := Digests(s)["portForwarding"]
	app.RunsAs, app.UID = "transmission", 70
	if Digests(s)["portForwarding"] == d {
		t.Error("a changed transmission user went unnoticed")
	}
	app.Password = "other"
	if pf := portForwardDigest(s.PortForward); strings.Contains(pf, "s3cret") || strings.Contains(pf, "other") {
		t.Errorf("the port-forwarding digest input holds the password: %s", pf)
	}
}

// TestDigestOnChangeUser: who onChange runs as is part of the port
// forwarding's digest, so a change to it is applied at reload like the
// rest of portForwarding (issue 20.8, issue 21.1).
func TestDigestOnChangeUser(t *testing.T) {
	s := testSpec(false)
	s.PortForward = &config.PortForwardSpec{Style: config.PortForwardProton, Protocols: []string{"tcp"}, OnChange: []string{"/bin/true"}}
	root := Digests(s)
	s.PortForward.OnChangeUser = "nobody"
	live, restart := Changed(root, Digests(s))
	if len(restart) != 0 || !slices.Equal(live, []string{"portForwarding"}) {
		t.Errorf("onChangeUser set: live %q restart %q, want live [portForwarding]", live, restart)
	}
}
