package bench

import "slices"

// shapingScenario is a named netem setting, per direction.
type shapingScenario struct {
	name  string
	netem []string
	desc  string
}

// scenarios are the shaped links offered when netem exists (the failover
// workload's --failover-shaping takes their names too).
var scenarios = []shapingScenario{
	{"delay20ms", []string{"delay", "10ms"}, "10 ms each way (20 ms added round trip)"},
	{"loss1pct", []string{"delay", "5ms", "loss", "0.5%"}, "5 ms and 0.5% loss each way (about 1% per round trip)"},
}

// shapingNames are the scenarios' names.
func shapingNames() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// shapingByName is the scenario called name (ok false: none).
func shapingByName(name string) (shapingScenario, bool) {
	i := slices.IndexFunc(scenarios, func(s shapingScenario) bool { return s.name == name })
	if i < 0 {
		return shapingScenario{}, false
	}
	return scenarios[i], true
}
