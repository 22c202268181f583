package apps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const testPassword = "s3cret:pa55"

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
