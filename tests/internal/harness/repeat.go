package harness

import (
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Repeat calls f at once and then again every interval (0: back to back) in
// a goroutine of its own, until stop is called: a datagram stream, probe
// rounds, a poller running while a test breaks something. stop returns once
// the call in progress is over, so what f recorded can be read after it.
func Repeat(interval time.Duration, f func()) (stop func()) {
	quit := make(chan struct{})
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			f()
			select {
			case <-quit:
				return
			case <-time.After(interval):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		done.Wait()
	}
}

// LeakRounds runs a round of leak probes at once and then every interval
// (0: back to back) until the returned function is called, which returns
// the number of rounds that ran and the probes that reached their target.
func LeakRounds(interval time.Duration, round func() []probe.Result) (stop func() (rounds int, leaks []probe.Result)) {
	var leaks []probe.Result
	rounds := 0
	stopRounds := Repeat(interval, func() {
		for _, r := range round() {
			if r.Reached() {
				leaks = append(leaks, r)
			}
		}
		rounds++
	})
	return func() (int, []probe.Result) {
		stopRounds()
		return rounds, leaks
	}
}
