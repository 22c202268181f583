// Package engine brings a confined namespace up and down transactionally:
// every step that changes the system records its undo in a journal, and a
// failed Up undoes them in reverse so that nothing is left behind.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
)

// journal records undo actions in the order their steps ran.
type journal struct {
	log   *slog.Logger
	undos []undo
}

type undo struct {
	step string
	fn   func() error
}

func (j *journal) add(step string, fn func() error) { j.undos = append(j.undos, undo{step, fn}) }

// rollback undoes every recorded step in reverse and returns the joined
// errors of undos that failed (the original failure is the caller's).
func (j *journal) rollback() error {
	var errs []error
	for i := len(j.undos) - 1; i >= 0; i-- {
		u := j.undos[i]
		if err := u.fn(); err != nil {
			j.log.Error("rollback step failed", "step", u.step, "err", err)
			errs = append(errs, fmt.Errorf("undo %s: %w", u.step, err))
		}
	}
	j.undos = nil
	return errors.Join(errs...)
}

// rollbackOn, deferred by a transaction with its named error, rolls back
// when *err is set and adds the rollback's own failure to it.
func (j *journal) rollbackOn(err *error) {
	if *err == nil {
		return
	}
	if rerr := j.rollback(); rerr != nil {
		*err = fmt.Errorf("%w (rollback: %v)", *err, rerr)
	}
}
