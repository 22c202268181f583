package apps

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeOwners answers every lookup with uid (or err) and records the
// connections it was asked about.
type fakeOwners struct {
	uid uint32
	err error

	mu    sync.Mutex
	asked []netip.AddrPort // the remote of each lookup
}

func (f *fakeOwners) PeerOwner(local, remote netip.AddrPort) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, remote)
	return f.uid, f.err
}

// checkedClient is NamespaceHTTPClient's client without a namespace: a
// plain dial, then the owner check against owners.
func checkedClient(want Owner, owners SocketOwners) Doer {
	var d net.Dialer
	return newHTTPClient(ownerCheckedDial(d.DialContext, want, owners))
}

// TestOwnerCheck: a listener of another uid than the application's gets
// no request (the fake application records none) and the error names
// its owner; a failed lookup sends nothing either; the application's
// own uid is sent the push (positive control).
func TestOwnerCheck(t *testing.T) {
	ctx := context.Background()
	creds := &Credentials{User: "alice", Password: testPassword}
	app := Owner{UID: 101, Name: "debian-transmission"}
	for _, tc := range []struct {
		name    string
		owners  *fakeOwners
		refused string // "": the push goes through
	}{
		{"another user's listener", &fakeOwners{uid: 4242424}, "belongs to uid 4242424, not to debian-transmission (uid 101): sent nothing"},
		{"root's listener", &fakeOwners{uid: 0}, "belongs to uid 0 (root), not to debian-transmission (uid 101): sent nothing"},
		{"lookup failed", &fakeOwners{err: errors.New("no established socket in the namespace answers")}, "check who listens: no established socket in the namespace answers: sent nothing"},
		{"the application's listener", &fakeOwners{uid: 101}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &fakeTransmission{sid: "abc", user: creds.User, pw: creds.Password}
			trURL := newFakeTransmission(t, tr)
			qb := &fakeQBittorrent{user: creds.User, pw: creds.Password}
			qbURL := newFakeQBittorrent(t, qb)
			c := checkedClient(app, tc.owners)
			trErr := NewTransmission(trURL, creds, c).Push(ctx, 41001, nil)
			qbErr := NewQBittorrent(qbURL, creds, c).Push(ctx, 41001, nil)
			if len(tc.owners.asked) < 2 {
				t.Fatalf("the owner was looked up for %v, want every connection", tc.owners.asked)
			}
			if tc.refused == "" {
				if trErr != nil || qbErr != nil {
					t.Fatalf("the application's own listener: %v; %v", trErr, qbErr)
				}
				if len(tr.bodies) != 1 || len(qb.sets) != 1 {
					t.Fatalf("pushed %d and %d times, want once each", len(tr.bodies), len(qb.sets))
				}
				return
			}
			for _, err := range []error{trErr, qbErr} {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("push: %v, want refused: %q", err, tc.refused)
				}
				checkOneLineNoSecret(t, err)
			}
			checkAppErr(t, trErr, "transmission "+trURL)
			checkAppErr(t, qbErr, "qbittorrent "+qbURL)
			if tr.requests != 0 || len(qb.referers) != 0 {
				t.Fatalf("a listener that is not the application's received %d and %d requests", tr.requests, len(qb.referers))
			}
		})
	}
}

func TestOwnerString(t *testing.T) {
	for o, want := range map[Owner]string{
		{UID: 101, Name: "debian-transmission"}: "debian-transmission (uid 101)",
		{UID: 101, Name: "101"}:                 "uid 101",
		{UID: 7}:                                "uid 7",
	} {
		if got := o.String(); got != want {
			t.Errorf("%#v: %q, want %q", o, got, want)
		}
	}
}
