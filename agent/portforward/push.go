package portforward

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// pushJob is the port to hand on; changed: the command runs too.
type pushJob struct {
	port      uint16
	protocols []string
	changed   bool
}

// push queues j for the push loop, replacing a job not started yet (the
// latest port wins; a change not yet announced stays a change).
func (m *Manager) push(j pushJob) {
	for {
		select {
		case m.jobs <- j:
			return
		default:
			select {
			case old := <-m.jobs:
				j.changed = j.changed || old.changed
			default:
			}
		}
	}
}

// pushLoop hands each job's port to the applications and, on a change, to
// the command; a push that fails is retried with backoff until it works
// or a newer job replaces it. Each push is bounded by pushTimeout.
// At quit, a job still queued (the port lost, at shutdown) goes out
// with shorter bounds, and the loop ends.
func (m *Manager) pushLoop(quit <-chan struct{}) {
	ctx := context.Background()
	var (
		job     pushJob
		pending map[Pusher]error
		fails   int
		retry   <-chan time.Time
	)
	for {
		select {
		case <-quit:
			select {
			case j := <-m.jobs:
				fctx, cancel := context.WithTimeout(ctx, finalTimeout)
				m.pushAll(fctx, j, m.targets(j, nil))
				cancel()
			default:
			}
			return
		case j := <-m.jobs:
			onChangePending := pending != nil && m.o.OnChange != nil && pending[m.o.OnChange] != nil
			j.changed = j.changed || onChangePending
			job, fails = j, 0
			pending = m.pushAll(ctx, job, m.targets(job, nil))
		case <-retry:
			pending = m.pushAll(ctx, job, pending)
		}
		retry = nil
		if len(pending) > 0 {
			fails++
			retry = time.After(m.backoff(fails))
		}
	}
}

// targets are the pushers a job goes to: the applications when there is
// a port, the command when the port changed; or what is still pending.
func (m *Manager) targets(j pushJob, pending map[Pusher]error) map[Pusher]error {
	if pending != nil {
		return pending
	}
	t := map[Pusher]error{}
	if j.port != 0 {
		for _, p := range m.o.Apps {
			t[p] = nil
		}
	}
	if j.changed && m.o.OnChange != nil {
		t[m.o.OnChange] = nil
	}
	return t
}

// pushAll pushes j to each target and returns the ones that failed.
func (m *Manager) pushAll(ctx context.Context, j pushJob, targets map[Pusher]error) map[Pusher]error {
	failed := map[Pusher]error{}
	for p := range targets {
		pctx, cancel := context.WithTimeout(ctx, pushTimeout)
		said, err := pushOne(pctx, p, j)
		cancel()
		if err != nil {
			failed[p] = err
			m.log.Warn("cannot hand the forwarded port to "+p.Name()+"; retrying", "port", j.port, "err", err)
			continue
		}
		done := []any{"to", p.Name(), "port", j.port}
		if said != "" {
			done = append(done, "result", said)
		}
		m.log.Info("forwarded port handed on", done...)
	}
	var names []string
	for p, err := range failed {
		names = append(names, fmt.Sprintf("%s: %v", p.Name(), err))
	}
	slices.Sort(names)
	m.update(func(s *Status) { s.Pending = names })
	if len(failed) == 0 {
		return nil
	}
	return failed
}

// pushOne pushes j to p, through PushReport when p is a Reporter.
func pushOne(ctx context.Context, p Pusher, j pushJob) (string, error) {
	if r, ok := p.(Reporter); ok {
		return r.PushReport(ctx, j.port, j.protocols)
	}
	return "", p.Push(ctx, j.port, j.protocols)
}
