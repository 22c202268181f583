package apps

import (
	"fmt"
	"log/slog"
)

// Credentials log in to an application's API (config reads them from
// the credentials file, at load). Formatting them (fmt's
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
