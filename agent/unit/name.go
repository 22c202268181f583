package unit

import (
	"fmt"
	"regexp"
	"strings"
)

// nameRE is systemd's unit name syntax (systemd.unit(5)): letters, digits,
// ":-_.\" and one "@" before the instance, then a unit type suffix.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|target|timer|path|mount|slice|scope)$`)

// CheckName reports why s is not a unit name that may be written into a
// generated unit (nil if it is). A template (foo@.service) cannot run, so
// it is refused too.
func CheckName(s string) error {
	switch {
	case len(s) > 255:
		return fmt.Errorf("%d characters long; systemd allows 255", len(s))
	case !nameRE.MatchString(s):
		return fmt.Errorf("%q is not a unit name (letters, digits, \":-_.\\\" and one @, ending in .service or another unit type)", strings.ToValidUTF8(s, "?"))
	case strings.Contains(s, "@."):
		return fmt.Errorf("%q is a template; name an instance such as %s", s, strings.Replace(s, "@.", "@NAME.", 1))
	}
	return nil
}
