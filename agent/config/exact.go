package config

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// checkKeys requires every object key of the decoded JSON v to be
// exactly the json name of a field of t, recursively: encoding/json
// matches names without regard to case, so "wireGuard" or "configfile"
// would otherwise be taken silently. The names come from t's json tags by
// reflection, so a new field needs no code here. path is where v sits
// ("" at the top). A key that is no field at all is reported as unknown;
// one that is a field spelt in another case names the right spelling.
func checkKeys(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaque(t) {
		return nil
	}
	switch v := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			for _, k := range slices.Sorted(maps.Keys(v)) {
				sub, at := v[k], join(path, k)
				ft, ok := fields[k]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fieldErr(at, "field names are case-sensitive", "unknown field %q (did you mean %q?)", k, name)
						}
					}
					return fieldErr(at, "remove it or check its spelling against the documented options", "unknown field")
				}
				if err := checkKeys(sub, ft, at); err != nil {
					return err
				}
			}
		case reflect.Map:
			for k, sub := range v {
				if err := checkKeys(sub, t.Elem(), join(path, k)); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, sub := range v {
				if err := checkKeys(sub, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// opaque: t decodes itself (or takes any JSON), so its keys are its own.
func opaque(t reflect.Type) bool {
	um := reflect.TypeFor[json.Unmarshaler]()
	tu := reflect.TypeFor[encoding.TextUnmarshaler]()
	pt := reflect.PointerTo(t)
	return t.Kind() == reflect.Interface || t.Implements(um) || pt.Implements(um) || t.Implements(tu) || pt.Implements(tu)
}

// jsonFields maps the json names of struct t's fields (with embedded
// structs' fields promoted, as encoding/json does) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					if _, ok := m[k]; !ok {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
