package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Issue 21.5: field names are matched exactly, at every depth; a name
// spelt in another case is refused with the right spelling.
func TestFieldNamesAreExact(t *testing.T) {
	const wg = `"wireguard":{"configFile":"/run/secrets/p.conf"}`
	for _, c := range []struct{ in, want string }{
		{`{"name":"a","wireGuard":{"configFile":"/p"}}`, `wireGuard: unknown field "wireGuard" (did you mean "wireguard"?); field names are case-sensitive`},
		{`{"name":"a","wireguard":{"configfile":"/p"}}`, `wireguard.configfile: unknown field "configfile" (did you mean "configFile"?)`},
		{`{"name":"a",` + wg + `,"DNS":{"mode":"strict"}}`, `DNS: unknown field "DNS" (did you mean "dns"?)`},
		{`{"Name":"a",` + wg + `}`, `Name: unknown field "Name" (did you mean "name"?)`},
		{`{"name":"a",` + wg + `,"openPorts":[{"port":1},{"Port":2}]}`, `openPorts[1].Port: unknown field "Port" (did you mean "port"?)`},
		{`{"name":"a",` + wg + `,"hostLink":{"portmappings":[]}}`, `hostLink.portmappings: unknown field "portmappings" (did you mean "portMappings"?)`},
		{`{"name":"a",` + wg + `,"portForwarding":{"NATPMP":{}}}`, `portForwarding.NATPMP: unknown field "NATPMP" (did you mean "natpmp"?)`},
		{`{"name":"a",` + wg + `,"memory":{"limit":1}}`, `memory.limit: unknown field; remove it`},
		{`{"name":"a",` + wg + `,"ipv6":"block","colour":"blue"}`, `colour: unknown field`},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
	// The control: the exact spellings parse, at every depth tried above.
	in := `{"name":"a",` + wg + `,"dns":{"mode":"strict"},"openPorts":[{"port":1}],"hostLink":{"portMappings":[]},"portForwarding":{"natpmp":{}}}`
	if c, err := Parse([]byte(in)); err != nil || c.WireGuard.ConfigFile != "/run/secrets/p.conf" || c.PortForwarding == nil || c.PortForwarding.NATPMP == nil {
		t.Errorf("Parse(exact names) = %+v, %v", c, err)
	}
}

// Every json name of the Config's types is checked: a document naming
// every field (by reflection, as its JSON would) in upper case is refused
// for each of them, and in its own case accepted.
func TestEveryFieldIsExact(t *testing.T) {
	n := 0
	var walk func(reflect.Type, string)
	walk = func(rt reflect.Type, path string) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || opaque(rt) {
			return
		}
		for name, ft := range jsonFields(rt) {
			n++
			doc := nest(path, strings.ToUpper(name))
			if _, err := Parse(doc); err == nil || !strings.Contains(err.Error(), `(did you mean "`+name+`"?)`) {
				t.Errorf("%s: %s accepted or not named: %v", doc, strings.ToUpper(name), err)
			}
			walk(ft, join(path, name))
		}
	}
	walk(reflect.TypeFor[Config](), "")
	if n < 40 {
		t.Errorf("only %d fields walked", n)
	}
}

// nest makes {"a":{"b":{KEY:null}}} for path "a.b"; a list field gets
// a list of one object.
func nest(path, key string) []byte {
	var v any = map[string]any{key: nil}
	if path != "" {
		parts := strings.Split(path, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			if listField[parts[i]] {
				v = []any{v}
			}
			v = map[string]any{parts[i]: v}
		}
	}
	b, _ := json.Marshal(v)
	return b
}

var listField = map[string]bool{"peers": true, "openPorts": true, "portMappings": true, "servers": true, "allowedEgress": true}

// Issue 21.7a: a JSON syntax error names its line and column.
func TestJSONSyntaxErrorLineColumn(t *testing.T) {
	for in, want := range map[string]string{
		"{\n  \"name\": \"a\",\n  \"wireguard\": {,\n}":      "line 3, column 17",
		"{\n  \"name\": \"ä\"\n  \"x\": 1}":                  "line 3, column 3",
		"{\n  \"name\": \"a\",\n  \"wireguard\": {\"configF": "line 3, column 25",
		"\xef\xbb\xbf{\"name\": x}":                          "line 1, column 10",
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "byte") {
			t.Errorf("Parse(%q) = %v, want an error at %q", in, err, want)
		}
	}
}
