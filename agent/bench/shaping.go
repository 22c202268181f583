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

// scenario is a shaped-link setting with its workloads: netem on both
// ends of the underlay veth, so direct and tunnelled traffic get exactly
// the same shaping (shaping_linux.go).
type scenario struct {
	shapingScenario
	workloads []Workload
	modes     []Mode
}

// ShapedBase are the workloads each shaped-link scenario runs, named
// NAME@SCENARIO (e.g. tcp1-up@loss1pct); --workloads may name them one
// by one.
var ShapedBase = []string{"tcp1-up", "tcp1-down", "ping-idle", "rr64"}

// shapedName reports whether name is a shaped workload (NAME@SCENARIO)
// of ShapedBase and a known scenario.
func shapedName(name string) bool {
	for _, s := range scenarios {
		for _, b := range ShapedBase {
			if name == b+"@"+s.name {
				return true
			}
		}
	}
	return false
}

// selectShaped returns the scenarios with the shaped workloads names
// selects (all of them when names is empty; with names, only the
// NAME@SCENARIO ones it lists), measured in modes; a scenario with none
// is left out.
func selectShaped(names []string, modes []Mode) []scenario {
	base, _ := FilterWorkloads(Workloads([]int{1}, ""), ShapedBase)
	var out []scenario
	for _, s := range scenarios {
		sc := scenario{shapingScenario: s, modes: modes}
		for _, w := range base {
			w.Name += "@" + s.name
			w.Shaping = s.name
			if len(names) == 0 || slices.Contains(names, w.Name) {
				sc.workloads = append(sc.workloads, w)
			}
		}
		if len(sc.workloads) > 0 {
			out = append(out, sc)
		}
	}
	return out
}
