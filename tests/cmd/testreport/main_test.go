package main

import (
	"strings"
	"testing"
)

func feed(t *testing.T, lines ...string) (string, bool) {
	t.Helper()
	var b strings.Builder
	r := newReport(&b)
	for _, l := range lines {
		var e event
		if err := jsonUnmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		r.add(e)
	}
	ok := r.finish(2)
	return b.String(), ok
}

func TestPassingSuite(t *testing.T) {
	out, ok := feed(t,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"quiet log\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":3.5}`,
		`{"Action":"run","Package":"p","Test":"TestB"}`,
		`{"Action":"run","Package":"p","Test":"TestB/x"}`,
		`{"Action":"pass","Package":"p","Test":"TestB/x","Elapsed":9}`,
		`{"Action":"pass","Package":"p","Test":"TestB","Elapsed":10}`,
		`{"Action":"output","Package":"p","Output":"ok  \tp\t12.0s\n"}`,
		`{"Action":"pass","Package":"p","Elapsed":12}`)
	if !ok || strings.Contains(out, "quiet log") || !strings.Contains(out, "ok  \tp\t12.0s") {
		t.Fatalf("ok %v, output:\n%s", ok, out)
	}
	if i, j := strings.Index(out, "p.TestB\n"), strings.Index(out, "p.TestA\n"); i < 0 || j < i || !strings.Contains(out, "9.0s  p.TestB/x") {
		t.Fatalf("slowest lists not in order:\n%s", out)
	}
}

func TestFailedAndUnfinished(t *testing.T) {
	out, ok := feed(t,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"why it failed\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestA","Elapsed":1}`,
		`{"Action":"run","Package":"p","Test":"TestHung"}`,
		`{"Action":"output","Package":"p","Test":"TestHung","Output":"waiting\n"}`,
		`{"Action":"output","Package":"p","Output":"panic: test timed out\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":60}`)
	for _, want := range []string{"why it failed", "--- NOT ENDED: TestHung (p)", "waiting", "panic: test timed out", "FAIL"} {
		if ok || !strings.Contains(out, want) {
			t.Errorf("ok %v; output lacks %q:\n%s", ok, want, out)
		}
	}
	if _, ok := feed(t); ok {
		t.Error("no package result passed")
	}
}
