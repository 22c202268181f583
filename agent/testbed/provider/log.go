package provider

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// eventLog appends one JSON line per event with a single write(2), so
// concurrent readers never see interleaved lines.
type eventLog struct {
	mu sync.Mutex
	w  io.WriteCloser
}

// openLog opens path for appending; "" discards events.
func openLog(path string) (*eventLog, error) {
	if path == "" {
		return &eventLog{w: nopCloser{io.Discard}}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open provider log %s: %w", path, err)
	}
	return &eventLog{w: f}, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func (l *eventLog) add(e Event) {
	e.Time = time.Now()
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(b)
}

func (l *eventLog) errorf(format string, args ...any) {
	l.add(Event{Kind: EvError, Msg: fmt.Sprintf(format, args...)})
}
