package config

import (
	"os/user"
	"strconv"
)

// LookupUser finds a user on this host by name or number (exec --user,
// portForwarding.onChangeUser); a number without a passwd entry is a bare
// uid (its own gid and name), as setpriv allows.
func LookupUser(s string) (*user.User, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		if u, err := user.LookupId(s); err == nil {
			return u, nil
		}
		return &user.User{Uid: s, Gid: s, Username: s}, nil
	}
	return user.Lookup(s)
}
