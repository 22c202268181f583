package apps

import (
	"bytes"
	"fmt"
	"log/slog"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// Credentials log in to an application's API. Formatting them (fmt's
// verbs, slog, JSON) shows the user and never the password.
type Credentials struct{ User, Password string }

const redacted = "[redacted]"

func (c Credentials) String() string { return fmt.Sprintf("{User:%s Password:%s}", c.User, redacted) }
func (c Credentials) GoString() string {
	return fmt.Sprintf("apps.Credentials{User:%q, Password:%q}", c.User, redacted)
}

// LogValue is what slog shows.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", c.User), slog.String("password", redacted))
}

// MarshalJSON keeps the password out of JSON, too.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"user":%q,"password":%q}`, c.User, redacted), nil
}

// CredentialsField names the file in ReadCredentials' errors.
const CredentialsField = "credentialsFile"

// ReadCredentials reads a credentials file: one line username:password,
// split at the first colon, a trailing newline trimmed. The file is
// checked as the agent's keys are (root's, mode 0600 or stricter: see
// config.ReadSecret). Errors are *config.FieldError naming
// CredentialsField and the path, never the content.
func ReadCredentials(path string) (Credentials, error) {
	return ReadCredentialsFor(CredentialsField, path)
}

// ReadCredentialsFor is ReadCredentials whose errors name field (e.g.
// "portForwarding.qbittorrent.credentialsFile").
func ReadCredentialsFor(field, path string) (Credentials, error) {
	data, err := config.ReadSecret(field, path)
	if err != nil {
		return Credentials{}, err
	}
	c, msg := parseCredentials(data)
	if msg != "" {
		return Credentials{}, &config.FieldError{Field: field, Msg: path + ": " + msg, Fix: "write one line username:password"}
	}
	return c, nil
}

// parseCredentials returns what is wrong with data, if anything, in
// words that echo none of it.
func parseCredentials(data []byte) (Credentials, string) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if bytes.ContainsAny(data, "\r\n") {
		return Credentials{}, "more than one line"
	}
	user, pass, ok := bytes.Cut(data, []byte(":"))
	switch {
	case len(data) == 0:
		return Credentials{}, "empty"
	case !ok:
		return Credentials{}, "no colon between username and password"
	case len(user) == 0:
		return Credentials{}, "empty username"
	}
	return Credentials{User: string(user), Password: string(pass)}, ""
}
