package bench

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
)

// WriteFile writes data to path atomically (mode 0644).
func WriteFile(path string, data []byte) error { return atomicfile.Write(path, data, 0o644) }

// WriteResult writes benchmark.json and the SVG chart.
func WriteResult(res *Result, jsonPath, svgPath string) error {
	b, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return fmt.Errorf("encode benchmark result: %w", err)
	}
	if err := WriteFile(jsonPath, append(b, '\n')); err != nil {
		return err
	}
	if svgPath == "" {
		return nil
	}
	return WriteFile(svgPath, []byte(Chart(res)))
}

// DefaultSVGPath is the chart's path next to the JSON file.
func DefaultSVGPath(jsonPath string) string {
	return strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath)) + ".svg"
}

// stepOrder lists engine step names in execution order.
func stepOrder(m map[string]float64) []string {
	known := []string{"lock+netns", "netns", "policy", "resolver", "tunnel", "addresses", "hostlink", "host-policy", "state"}
	var out, rest []string
	for _, k := range known {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	for k := range m {
		if !slices.Contains(known, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}
