package e2e

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// The report TestMain writes to $VPNC_MATRIX_REPORT after the run: the
// fault suite's one-line summaries, then the sidecar matrix (its "leak
// matrix (sidecar): ..." line, or why it did not run), the container matrix (its
// "leak matrix (podman container): ..." line, or why it did not run) and
// the leak matrix (which ends with the "leak matrix: ..." line). Nothing is written when the matrix did not
// run (e.g. -run selected other tests).
var report struct {
	sync.Mutex
	matrix string
	faults []string
}

func recordMatrix(text string) {
	report.Lock()
	defer report.Unlock()
	report.matrix = text
}

// recordFault adds one line to the fault-suite section of the report.
func recordFault(t *testing.T, line string) {
	t.Helper()
	t.Log(line)
	report.Lock()
	defer report.Unlock()
	report.faults = append(report.faults, line)
}

func writeReport(path string) error {
	report.Lock()
	defer report.Unlock()
	if path == "" || report.matrix == "" {
		return nil
	}
	var b strings.Builder
	if len(report.faults) > 0 {
		b.WriteString("fault suite (tests/e2e/faults_test.go):\n")
		for _, f := range report.faults {
			b.WriteString("  " + f + "\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(report.matrix)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
