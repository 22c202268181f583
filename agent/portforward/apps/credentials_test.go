package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

const testPassword = "s3cret:pa55"

func writeCreds(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadCredentials(t *testing.T) {
	for _, content := range []string{"alice:" + testPassword, "alice:" + testPassword + "\n", "alice:" + testPassword + "\r\n"} {
		c, err := ReadCredentials(writeCreds(t, content, 0o600))
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		if c.User != "alice" || c.Password != testPassword {
			t.Fatalf("%q: got user %q password %q, want alice and %q (split at the first colon)", content, c.User, c.Password, testPassword)
		}
	}
	c, err := ReadCredentials(writeCreds(t, "bob:", 0o400))
	if err != nil || c.User != "bob" || c.Password != "" {
		t.Fatalf("empty password: %+v %v", c, err)
	}
}

func TestReadCredentialsRefuses(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"", "empty"},
		{"\n", "empty"},
		{"alice-s3cret-pa55", "no colon"},
		{":" + testPassword, "empty username"},
		{"alice:" + testPassword + "\nmore", "more than one line"},
		{"alice:" + testPassword + "\n\n", "more than one line"},
	} {
		_, err := ReadCredentials(writeCreds(t, tc.content, 0o600))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.content, err, tc.want)
			continue
		}
		checkOneLineNoSecret(t, err)
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != CredentialsField {
			t.Errorf("%q: error %#v is no FieldError of %s", tc.content, err, CredentialsField)
		}
	}
	p := writeCreds(t, "alice:"+testPassword, 0o640)
	_, err := ReadCredentials(p)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("mode 0640: error %v, want the chmod fix", err)
	}
	checkOneLineNoSecret(t, err)
	if _, err := ReadCredentials(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("absent file: %v", err)
	}
	const field = "portForwarding.qbittorrent.credentialsFile"
	for _, p := range []string{p, writeCreds(t, "no colon", 0o600)} {
		if _, err := ReadCredentialsFor(field, p); err == nil || !strings.HasPrefix(err.Error(), field+": "+p) {
			t.Fatalf("ReadCredentialsFor: %v, want the error to name %s and %s", err, field, p)
		}
	}
	if os.Geteuid() == 0 {
		p := writeCreds(t, "alice:"+testPassword, 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := ReadCredentials(p)
		if err == nil || !strings.Contains(err.Error(), "not root") {
			t.Fatalf("file owned by nobody: %v", err)
		}
		checkOneLineNoSecret(t, err)
	}
}

// checkOneLineNoSecret fails if err's text spans lines or shows the
// test password (or its halves).
func checkOneLineNoSecret(t *testing.T, err error) {
	t.Helper()
	s := err.Error()
	if strings.ContainsAny(s, "\r\n") {
		t.Errorf("error is not one line: %q", s)
	}
	for _, secret := range []string{testPassword, "s3cret", "pa55"} {
		if strings.Contains(s, secret) {
			t.Errorf("error shows the password: %q", s)
		}
	}
}

func TestCredentialsRedacted(t *testing.T) {
	c := Credentials{User: "alice", Password: testPassword}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("push", "creds", c, "ptr", &c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("push", "creds", c)
	js, err := json.Marshal(struct{ C Credentials }{c})
	if err != nil {
		t.Fatal(err)
	}
	shown := []string{
		fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, c, c),
		fmt.Sprintf("%v %+v %#v %s", &c, &c, &c, &c),
		fmt.Sprintf("%+v %#v", struct{ C Credentials }{c}, struct{ C Credentials }{c}),
		logged.String(), string(js),
	}
	for _, s := range shown {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "pa55") {
			t.Errorf("password shown: %s", s)
		}
		if !strings.Contains(s, "alice") || !strings.Contains(s, redacted) {
			t.Errorf("want the user and %s in %s", redacted, s)
		}
	}
}
