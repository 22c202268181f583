package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// docs/config.md is what the doc comments say now.
func TestConfigReferenceIsCurrent(t *testing.T) {
	want, err := Render("../..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/config.md is stale: run go generate ./agent/config")
	}
	for _, f := range []string{"`name`", "`wireguard.configFile`", "`wireguard.peers[].endpoint`", "`dns.search`", "`hostLink.portMappings[].to`"} {
		if !strings.Contains(string(want), f) {
			t.Errorf("reference lacks %s", f)
		}
	}
}
