package engine

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// The journal undoes in reverse order, tries every undo even when some
// fail, joins their errors, and is empty afterwards.
func TestJournalRollback(t *testing.T) {
	var ran []string
	errB, errA := errors.New("b failed"), errors.New("a failed")
	j := &journal{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	undo := func(name string, err error) func() error {
		return func() error { ran = append(ran, name); return err }
	}
	j.add("a", undo("a", errA))
	j.add("b", undo("b", errB))
	j.add("c", undo("c", nil))

	err := j.rollback()
	if want := []string{"c", "b", "a"}; !slices.Equal(ran, want) {
		t.Errorf("undo order %v, want %v", ran, want)
	}
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Errorf("rollback error %v does not join both failures", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "undo b: b failed") || !strings.Contains(msg, "undo a: a failed") || strings.Index(msg, "undo b") > strings.Index(msg, "undo a") {
		t.Errorf("rollback error %q: want each failure named by its step, in undo order", msg)
	}
	if len(j.undos) != 0 {
		t.Errorf("journal keeps %d undos after rollback", len(j.undos))
	}
	ran = nil
	if err := j.rollback(); err != nil || len(ran) != 0 {
		t.Errorf("second rollback ran %v (err %v), want nothing", ran, err)
	}
}

func TestJournalRollbackEmpty(t *testing.T) {
	j := &journal{log: slog.Default()}
	if err := j.rollback(); err != nil {
		t.Errorf("empty rollback: %v", err)
	}
}
