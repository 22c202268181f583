package bench

import "testing"

// The scale targets compare the last ten ups with the first ten, and
// judge status of all and the idle memory per agent.
func TestScaleTargets(t *testing.T) {
	mk := func(grow float64, statusMs float64, rssMiB, pssMiB int64) *Scale {
		s := &Scale{N: 100, StatusMs: []float64{statusMs}}
		for i := range 100 {
			s.UpMs = append(s.UpMs, 20*(1+grow*float64(i)/99))
			s.IdleRSSKiB = append(s.IdleRSSKiB, rssMiB*1024)
			s.IdlePSSKiB = append(s.IdlePSSKiB, pssMiB*1024)
		}
		s.summarize()
		return s
	}
	for _, c := range []struct {
		name                      string
		s                         *Scale
		growth, status, rss, psss bool
	}{
		{"flat, fast, small", mk(0, 90, 9, 5), true, true, true, true},
		{"ups grow 2x", mk(1, 90, 9, 5), false, true, true, true},
		{"slow status (issue 25: over 100 ms)", mk(0, 150, 9, 5), true, false, true, true},
		{"RSS over, PSS under", mk(0, 90, 18, 5), true, true, false, true},
	} {
		ts := scaleTargets(c.s)
		for name, want := range map[string]bool{"scale-up-growth": c.growth, "scale-status-all-ms": c.status, "scale-idle-rss-mib": c.rss, "scale-idle-pss-mib": c.psss} {
			tg, ok := targetByName(ts, name)
			if !ok || tg.Met != want {
				t.Errorf("%s: %s = %+v, want met %v", c.name, name, tg, want)
			}
		}
	}
	if s := mk(1, 150, 9, 5); s.Window != 10 || s.Growth < 1.8 || s.Growth > 2 {
		t.Errorf("window %d growth %v", s.Window, s.Growth)
	}
	// A status run that reports an unhealthy namespace does not pass.
	s := mk(0, 150, 9, 5)
	s.StatusExit = 1
	if tg, _ := targetByName(scaleTargets(s), "scale-status-all-ms"); tg.Met {
		t.Errorf("status exit 1 met: %+v", tg)
	}
}
