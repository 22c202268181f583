package cli

import (
	"fmt"
	"io"
	"os"
)

func cmdBench(args []string, out io.Writer) int {
	fmt.Fprintln(os.Stderr, "vpn-agent: bench is not built yet in this version")
	return ExitFailure
}
