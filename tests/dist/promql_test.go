package dist

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// promqlNames returns the metric names and the label names that a PromQL
// expression uses. It is no parser: promtool checks the syntax; this
// only has to tell the names apart in an expression promtool accepts.
// Strings and comments go first (a matcher's value is never a name), then
// range and subquery brackets (durations), then the label names of each
// {matcher, ...} and of by/without/on/ignoring/group_left/group_right
// (...); of the identifiers left, one followed by "(" is a function or an
// aggregation (it must be one PromQL has), a keyword is skipped, and any
// other is a metric name. A selector of the form {__name__=...} or
// {"metric"} is refused: write the metric's name.
func promqlNames(expr string) (metrics, labels []string, err error) {
	s, err := stripStrings(expr)
	if err != nil {
		return nil, nil, err
	}
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")
	matcher := regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*""\s*$`)
	var bad error
	s = regexp.MustCompile(`\{[^{}]*\}`).ReplaceAllStringFunc(s, func(b string) string {
		for _, item := range strings.Split(b[1:len(b)-1], ",") {
			if strings.TrimSpace(item) == "" {
				continue
			}
			m := matcher.FindStringSubmatch(item)
			if m == nil || m[1] == "__name__" {
				bad = fmt.Errorf("unsupported matcher %q", item)
				continue
			}
			labels = append(labels, m[1])
		}
		return " "
	})
	if bad != nil {
		return nil, nil, bad
	}
	s = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`).ReplaceAllStringFunc(s, func(g string) string {
		list := g[strings.Index(g, "(")+1 : len(g)-1]
		for _, l := range strings.Split(list, ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		return " "
	})
	s = strings.ReplaceAll(s, `""`, " ") // strings outside selectors: function arguments
	if strings.ContainsAny(s, `{}[]"`) {
		return nil, nil, fmt.Errorf("cannot read %q", s)
	}
	tok := regexp.MustCompile(`[0-9.]*[a-zA-Z_:][a-zA-Z0-9_:]*`)
	for _, loc := range tok.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		if w[0] == '.' || (w[0] >= '0' && w[0] <= '9') {
			continue // a number or a duration (offset 5m)
		}
		lw := strings.ToLower(w)
		if promqlKeywords[lw] {
			continue
		}
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			if !promqlFuncs[w] && !promqlAggregations[lw] {
				return nil, nil, fmt.Errorf("%s( is no PromQL function", w)
			}
			continue
		}
		if !regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`).MatchString(w) {
			return nil, nil, fmt.Errorf("cannot read %q", w)
		}
		metrics = append(metrics, w)
	}
	return metrics, labels, nil
}

// stripStrings replaces each string literal of s with "" and drops
// comments.
func stripStrings(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\'', '`':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(s) {
				return "", fmt.Errorf("unterminated string in %q", s)
			}
			b.WriteString(`""`)
			i = j
		case '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

var promqlKeywords = setOf("and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
	"group_left", "group_right", "inf", "nan", "atan2")

var promqlAggregations = setOf("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile")

var promqlFuncs = setOf("abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time",
	"day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "exp", "floor",
	"histogram_count", "histogram_fraction", "histogram_quantile", "histogram_sum", "holt_winters", "hour",
	"idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
	"mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
	"present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh",
	"sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
	"timestamp", "vector", "year", "start", "end")

func setOf(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

func TestPromqlNames(t *testing.T) {
	for _, c := range []struct {
		expr            string
		metrics, labels string
	}{
		{`vpn_confinement_up == 0`, "vpn_confinement_up", ""},
		{`sum by (job, instance) (rate(a_total{counter=~"out_.*", x!="b{c}"}[5m])) > 0.1`, "a_total", "counter x job instance"},
		{`sum(rate(a_total[5m] offset 1h)) without (kind) / on(namespace) group_left(state) b == bool 1`, "a_total b", "kind namespace state"},
		{`time() - a{namespace=~"proton"} # a comment naming c_total`, "a", "namespace"},
		{`absent(up{job="vpn-confinement"})`, "up", "job"},
		{`max_over_time(a[1h:5m]) and b unless c or d`, "a b c d", ""},
		{`label_replace(a, "dst", "$1", "src", "(.*)")`, "a", ""},
		{`1e3 * a + Inf - NaN`, "a", ""},
	} {
		m, l, err := promqlNames(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := strings.Join(m, " "); got != c.metrics {
			t.Errorf("%s: metrics %q, want %q", c.expr, got, c.metrics)
		}
		if got := strings.Join(l, " "); got != c.labels {
			t.Errorf("%s: labels %q, want %q", c.expr, got, c.labels)
		}
	}
	for _, bad := range []string{`{__name__="a"}`, `{"a"}`, `a{b="c}`, `ratee(a[5m])`} {
		if m, l, err := promqlNames(bad); err == nil {
			t.Errorf("%s: read as %q %q, want an error", bad, m, l)
		}
	}
}
