// Command testreport reads `go test -json` on stdin and prints what a
// plain (non -v) `go test` would: the packages' result lines, build errors
// and the whole output of every test that failed (or never ended: a
// timeout or a panic), then the slowest top-level tests with their times,
// so that CI's log shows where the suite's minutes go. It exits 1 when a
// test or a package failed, or when no package reported a result.
//
//	go test -json ./tests/e2e | testreport -slowest 15
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

type report struct {
	out      io.Writer
	buf      map[key][]string // output of tests that have not ended
	order    []key            // tests in the order they started
	slow     []timed          // top-level tests that passed or failed
	slowSub  []timed          // their subtests
	failed   bool
	packages int
}

type timed struct {
	name    string
	elapsed time.Duration
	result  string
}

func newReport(out io.Writer) *report {
	return &report{out: out, buf: map[key][]string{}}
}

func (r *report) add(e event) {
	k := key{e.Package, e.Test}
	switch {
	case e.Action == "build-output" || (e.Test == "" && e.Action == "output"):
		fmt.Fprint(r.out, e.Output)
	case e.Test == "":
		switch e.Action {
		case "pass", "fail", "skip":
			r.packages++
			r.failed = r.failed || e.Action == "fail"
		case "build-fail":
			r.failed = true
		}
	case e.Action == "run":
		r.buf[k] = nil
		r.order = append(r.order, k)
	case e.Action == "output":
		r.buf[k] = append(r.buf[k], e.Output)
	case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
		if e.Action == "fail" {
			r.failed = true
			for _, l := range r.buf[k] {
				fmt.Fprint(r.out, l)
			}
		}
		delete(r.buf, k)
		if e.Action != "skip" {
			t := timed{e.Package + "." + e.Test, time.Duration(e.Elapsed * float64(time.Second)), e.Action}
			if strings.Contains(e.Test, "/") {
				r.slowSub = append(r.slowSub, t)
			} else {
				r.slow = append(r.slow, t)
			}
		}
	}
}

// finish prints the output of the tests that never ended and the slowest
// tests; false when something failed.
func (r *report) finish(slowest int) bool {
	for _, k := range r.order {
		if lines, open := r.buf[k]; open {
			r.failed = true
			fmt.Fprintf(r.out, "--- NOT ENDED: %s (%s)\n", k.test, k.pkg)
			for _, l := range lines {
				fmt.Fprint(r.out, l)
			}
		}
	}
	if r.packages == 0 {
		fmt.Fprintln(r.out, "testreport: no package reported a result")
		r.failed = true
	}
	r.list("top-level tests", r.slow, slowest)
	r.list("subtests", r.slowSub, slowest)
	return !r.failed
}

// list prints the n slowest of ts. Parallel tests overlap, and each is
// timed from its start after any wait for a slot (go test's own times).
func (r *report) list(what string, ts []timed, n int) {
	slices.SortStableFunc(ts, func(a, b timed) int { return int(b.elapsed - a.elapsed) })
	if n = min(n, len(ts)); n == 0 {
		return
	}
	fmt.Fprintf(r.out, "slowest %d of %d %s (parallel ones overlap):\n", n, len(ts), what)
	for _, t := range ts[:n] {
		mark := ""
		if t.result == "fail" {
			mark = "  FAIL"
		}
		fmt.Fprintf(r.out, "  %7.1fs  %s%s\n", t.elapsed.Seconds(), t.name, mark)
	}
}

func main() {
	slowest := flag.Int("slowest", 15, "how many of the slowest top-level tests to list")
	flag.Parse()
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := jsonUnmarshal(sc.Text(), &e); err != nil {
			// Not an event (go test's own words before the JSON starts).
			fmt.Println(sc.Text())
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading stdin:", err)
		os.Exit(1)
	}
	if !r.finish(*slowest) {
		os.Exit(1)
	}
}

func jsonUnmarshal(line string, e *event) error {
	if !strings.HasPrefix(line, "{") {
		return fmt.Errorf("not JSON: %.40q", line)
	}
	return json.Unmarshal([]byte(line), e)
}
