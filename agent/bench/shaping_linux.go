package bench

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// shapingPlan detects sch_netem and returns the scenarios to run. It
// records why none run. It never emulates shaping any other way.
func (r *runner) shapingPlan() []scenario {
	info := &r.res.Shaping
	if r.o.Shaping == "off" {
		info.Reason = "disabled with --shaping off"
		return nil
	}
	if len(r.o.Workloads) > 0 && !slices.ContainsFunc(r.o.Workloads, isShaped) {
		info.Reason = "no shaped-link workload (NAME@SCENARIO) in --workloads"
		return nil
	}
	if r.o.TC == "" {
		info.Reason = "tc not found on PATH: shaped-link scenarios (netem delay/loss) skipped"
		return nil
	}
	if err := r.netem([]string{"delay", "1ms"}); err != nil {
		info.Reason = "sch_netem unavailable on this kernel (" + err.Error() + "): shaped-link scenarios skipped, not emulated"
		return nil
	}
	r.clearNetem()
	var modes []Mode
	for _, m := range r.o.Modes {
		if m == ModeDirect || m == ModeTunnel {
			modes = append(modes, m)
		}
	}
	out := selectShaped(r.o.Workloads, modes)
	for _, sc := range out {
		info.Scenarios = append(info.Scenarios, sc.name+": netem "+sc.desc+" on the underlay veth")
	}
	info.Available = true
	info.Reason = "sch_netem available"
	return out
}

// shaped runs a scenario's workloads with netem in place.
func (r *runner) shaped(ctx context.Context, sc scenario) error {
	if len(sc.modes) == 0 {
		return nil
	}
	if err := r.netem(sc.netem); err != nil {
		return fmt.Errorf("shaping %s: %w", sc.name, err)
	}
	defer r.clearNetem()
	for _, w := range sc.workloads {
		if err := r.workload(ctx, w, sc.modes); err != nil {
			return err
		}
	}
	return nil
}

// netem puts a netem root qdisc on both veth ends.
func (r *runner) netem(args []string) error {
	for _, e := range []struct {
		th  *testbed.Thread
		dev string
	}{{r.t.under, r.t.VethU}, {r.t.prov, r.t.VethP}} {
		cmd := exec.Command(r.o.TC, append([]string{"qdisc", "replace", "dev", e.dev, "root", "netem"}, args...)...)
		var out []byte
		err := e.th.Do(func() error {
			var err error
			out, err = cmd.CombinedOutput()
			return err
		})
		if err != nil {
			return fmt.Errorf("%s (%v)", strings.Join(strings.Fields(string(out)), " "), err)
		}
	}
	return nil
}

func (r *runner) clearNetem() {
	for _, e := range []struct {
		th  *testbed.Thread
		dev string
	}{{r.t.under, r.t.VethU}, {r.t.prov, r.t.VethP}} {
		e.th.Do(func() error {
			return exec.Command(r.o.TC, "qdisc", "del", "dev", e.dev, "root").Run()
		})
	}
}
