package dist

// The shipped Grafana dashboard and Prometheus alert rules (issue 24
// part 4): promtool accepts the rules and their unit tests, which cover
// every alert firing and not firing; every PromQL expression of the
// dashboard parses (promtool, as recording rules); and every metric and
// label that the dashboard and the rules name is one the agent exports,
// as the agent's own metrics registry reports them, so renaming a metric
// in agent/metrics breaks this test until both follow.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"gopkg.in/yaml.v3"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/metrics"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

var (
	alertsFile     = filepath.Join(root, "dist", "prometheus", "alerts.yml")
	alertTestsFile = filepath.Join(root, "dist", "prometheus", "alerts_test.yml")
	dashboardFile  = filepath.Join(root, "dist", "grafana", "vpn-confinement.json")
)

// scrapeJob is the job name alerts.yml's "agent" alerts assume (and the
// docs' scrape configs use).
const scrapeJob = "vpn-confinement"

// labelValues are the values of each label of a metric's series.
type labelValues map[string]map[string]bool

// exported is every metric family the agent exports, with the labels of
// its series and their values, from the agent's own registry. Every series that
// appears only with some state (a handshake, port forwarding, a failover
// loop's state) is made to appear, and Describe checks that none is left
// out.
func exported(t *testing.T) map[string]labelValues {
	t.Helper()
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(&config.Spec{Name: "proton", PrivateKey: key, Peers: []config.PeerSpec{{PublicKey: key.PublicKey(), Endpoint: "198.51.100.1:51820"}}})
	hs := time.Now()
	m.Publish(&health.Report{
		Name: "proton", Interface: "wg-proton", Namespace: true,
		Link:   health.Link{Present: true, Up: true},
		Policy: health.Policy{Loaded: true, Matches: true, Drops: map[string]uint64{"out_reject": 1}},
		Peers: []health.Peer{{Endpoint: "198.51.100.1:51820", LatestHandshake: &hs, RxBytes: 1, TxBytes: 1},
			{Endpoint: "198.51.100.2:51820", LatestHandshake: &hs, Standby: true}}, // a warm standby (issue 25)
	})
	m.SetStandby(&metrics.Standby{Server: 1, Warm: true})
	m.PortForwarded(portforward.Status{State: portforward.StateMapped, Port: 40001, Protocols: []string{"tcp"}, Requests: 1})
	m.Recovering(liveness.Healthy)
	m.FailedOver(0)
	m.Repaired(health.PolicyMissing)
	m.ProbeFailed()

	reg := m.Registry()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]labelValues{}
	for _, f := range fams {
		labels := labelValues{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] == nil {
					labels[l.GetName()] = map[string]bool{}
				}
				labels[l.GetName()][l.GetValue()] = true
			}
		}
		out[f.GetName()] = labels
	}
	// Every metric the agent describes is among those gathered: a new
	// one that needs some state to appear must get it above.
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	described := 0
	for d := range ch {
		mm := fq.FindStringSubmatch(d.String())
		if mm == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		if strings.HasPrefix(mm[1], "vpn_confinement_") {
			described++
			if out[mm[1]] == nil {
				t.Errorf("the agent describes %s but the fixture does not make it appear: give it the state it needs", mm[1])
			}
		}
	}
	if described < 10 {
		t.Fatalf("only %d vpn_confinement_ metrics described", described)
	}
	return out
}

func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; scripts/deps.sh installs it): rules and dashboard queries not checked by promtool")
	}
	return p
}

func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtoolPath(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return f
}

func TestAlertRulesPromtool(t *testing.T) {
	promtool(t, ".", "check", "rules", alertsFile)
	promtool(t, filepath.Dir(alertTestsFile), "test", "rules", filepath.Base(alertTestsFile))
}

// Every alert has a severity, a summary and a description, and
// alerts_test.yml has a case where it fires and one where it does not
// (and no case for an alert that does not exist).
func TestAlertRulesTested(t *testing.T) {
	rules := loadAlerts(t)
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
		}
	}
	if len(alerts) < 7 {
		t.Fatalf("%d alerts in %s", len(alerts), alertsFile)
	}
	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				EvalTime  string `yaml:"eval_time"`
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(alertsFile)}) {
		t.Errorf("%s tests rule files %q, want [%s]", alertTestsFile, tests.RuleFiles, filepath.Base(alertsFile))
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			if !alerts[c.Alertname] {
				t.Errorf("%s (%s at %s): no alert %q in %s", alertTestsFile, tc.Name, c.EvalTime, c.Alertname, alertsFile)
			}
			if len(c.ExpAlerts) > 0 {
				firing[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !firing[a] {
			t.Errorf("alert %s has no case in %s where it fires", a, alertTestsFile)
		}
		if !quiet[a] {
			t.Errorf("alert %s has no case in %s where it does not fire", a, alertTestsFile)
		}
	}
}

// Every metric the alerts name is the agent's, or up, which Prometheus
// adds to each target; every label is one of those metrics' or a target
// label; the agent alerts select the documented job.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	have := exported(t)
	have["up"] = labelValues{}
	jobs := 0
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			checkQuery(t, "alert "+r.Alert, r.Expr, "", have)
			if strings.Contains(r.Expr, "up{") {
				jobs++
				if !strings.Contains(r.Expr, `up{job="`+scrapeJob+`"}`) {
					t.Errorf("alert %s: %s does not select job %q", r.Alert, r.Expr, scrapeJob)
				}
			}
		}
	}
	if jobs == 0 {
		t.Errorf("no alert on Prometheus's up{job=%q}: nothing says an agent is not scraped", scrapeJob)
	}
}

// dashboard is the Grafana dashboard, as far as these tests read it.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Repeat     string      `json:"repeat"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Datasource   *datasource `json:"datasource"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// query is one PromQL expression of the dashboard, where it is.
type query struct{ where, expr, legend string }

func loadDashboard(t *testing.T) (dashboard, []query) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				if p.Datasource == nil || *p.Datasource != (datasource{"prometheus", "${datasource}"}) {
					t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
			}
			for i, q := range p.Targets {
				if q.Datasource == nil || *q.Datasource != (datasource{"prometheus", "${datasource}"}) {
					t.Errorf("panel %q query %d: datasource %v, want the ${datasource} variable", p.Title, i, q.Datasource)
				}
				qs = append(qs, query{fmt.Sprintf("panel %q query %d", p.Title, i), q.Expr, q.LegendFormat})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
		}
		// label_values(SELECTOR, LABEL): SELECTOR is PromQL, and LABEL
		// one of its labels (checked as a legend {{LABEL}}).
		m := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`).FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
		}
		qs = append(qs, query{"variable " + v.Name, m[1], "{{" + m[2] + "}}"})
	}
	return d, qs
}

// grafanaVars are the dashboard's variables and Grafana's built-ins, with
// a value of the right kind for checking the query.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m",
	"$__range", "6h", "${__range}", "6h",
	"${namespace}", "proton", "$namespace", "proton",
)

// The dashboard: current Grafana's schema, a data source variable every
// panel uses, a namespace variable from the agent's labels, a row per
// namespace; every query parses and names only what the agent exports.
func TestDashboard(t *testing.T) {
	d, qs := loadDashboard(t)
	if d.SchemaVersion < 39 || d.UID == "" {
		t.Errorf("schemaVersion %d, uid %q: want a current Grafana's (39 or later) and a uid", d.SchemaVersion, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["namespace"] != "query" {
		t.Errorf("template variables %v, want datasource (a data source) and namespace (a query)", vars)
	}
	if len(d.Panels) == 0 || d.Panels[0].Type != "row" || d.Panels[0].Repeat != "namespace" {
		t.Errorf("the first panel is not a row repeated per namespace")
	}
	have := exported(t)
	var rules []map[string]string
	for i, q := range qs {
		expr := grafanaVars.Replace(q.expr)
		if strings.Contains(expr, "$") || strings.Contains(expr, "[[") {
			t.Errorf("%s: %q uses a variable the dashboard does not define", q.where, q.expr)
			continue
		}
		checkQuery(t, q.where, expr, q.legend, have)
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, ".", "check", "rules", f)

	// What the issue asks the dashboard to show, each from its metric.
	for what, metric := range map[string]string{
		"up": "vpn_confinement_up", "handshake age": "vpn_confinement_tunnel_last_handshake_timestamp_seconds",
		"tunnel bytes": "vpn_confinement_tunnel_receive_bytes_total", "kill-switch drops": "vpn_confinement_killswitch_packets_total",
		"failovers": "vpn_confinement_failovers_total", "the active server": "vpn_confinement_server_info",
		"the forwarded port": "vpn_confinement_forwarded_port",
	} {
		if !slices.ContainsFunc(qs, func(q query) bool { return slices.Contains(mustNames(t, q.expr), metric) }) {
			t.Errorf("the dashboard does not show %s (%s)", what, metric)
		}
	}
}

func mustNames(t *testing.T, expr string) []string {
	t.Helper()
	ms, _, err := promqlNames(grafanaVars.Replace(expr))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// checkQuery fails t unless expr names at least one metric, each one in
// have, and every label it (or its legend's {{label}}) uses is a label of
// one of them or a target label.
func checkQuery(t *testing.T, where, expr, legend string, have map[string]labelValues) {
	t.Helper()
	metrics, labels, err := promqlNames(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	if len(metrics) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, m := range regexp.MustCompile(`{{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*}}`).FindAllStringSubmatch(legend, -1) {
		labels = append(labels, m[1])
	}
	known := map[string]bool{}
	for _, l := range targetLabels {
		known[l] = true
	}
	for _, m := range metrics {
		ls, ok := have[m]
		if !ok {
			t.Errorf("%s: %q names %s, which the agent does not export", where, expr, m)
		}
		for l := range ls {
			known[l] = true
		}
	}
	// A label whose every value the agent always exports (the recovery
	// states, the kinds of repair) is matched only on one of them.
	for _, m := range regexp.MustCompile(`\b(state|kind)\s*(=|!=)\s*"([^"]*)"`).FindAllStringSubmatch(expr, -1) {
		ok := false
		for _, name := range metrics {
			ok = ok || have[name][m[1]][m[3]]
		}
		if !ok {
			t.Errorf("%s: %q matches %s=%q, a value the agent never exports", where, expr, m[1], m[3])
		}
	}
	for _, l := range labels {
		if !known[l] {
			var k []string
			for l := range known {
				k = append(k, l)
			}
			sort.Strings(k)
			t.Errorf("%s: %q uses label %s, which none of %v has (labels: %v)", where, expr, l, metrics, k)
		}
	}
}
