package bench

import (
	"errors"
	"os"
	"slices"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fixtures are real iperf3 3.12 outputs captured on the development
// machine (loopback inside a namespace).
func TestParseIperf3TCP(t *testing.T) {
	r, err := ParseIperf3(readFixture(t, "iperf3-tcp1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Protocol != "TCP" || r.Streams != 1 || r.Reverse || r.Omit != 1 || r.Duration != 1 {
		t.Errorf("test_start: %+v", r)
	}
	if r.Bytes != 2096234496 || r.BitsPerSecond != 16755449525.95815 {
		t.Errorf("receiver sum: bytes %d bps %v", r.Bytes, r.BitsPerSecond)
	}
	if r.MovedBytes != 1790312448+2094530560 {
		t.Errorf("moved bytes (omitted interval included) = %d", r.MovedBytes)
	}
	if r.Retransmits != 2 {
		t.Errorf("retransmits = %d", r.Retransmits)
	}
}

func TestParseIperf3Reverse(t *testing.T) {
	r, err := ParseIperf3(readFixture(t, "iperf3-tcp2-reverse.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Reverse || r.Streams != 2 || r.Bytes != 2166358016 {
		t.Errorf("reverse: %+v", r)
	}
}

func TestParseIperf3UDP(t *testing.T) {
	r, err := ParseIperf3(readFixture(t, "iperf3-udp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Protocol != "UDP" || r.BlockLen != 1392 || r.Packets != 8980 || r.LostPackets != 0 || r.LostPercent != 0 {
		t.Errorf("udp: %+v", r)
	}
	if r.JitterMs != 0.00988195918362959 {
		t.Errorf("jitter = %v (must be the receiver's)", r.JitterMs)
	}
}

func TestParseIperf3Error(t *testing.T) {
	_, err := ParseIperf3(readFixture(t, "iperf3-error.json"))
	if !errors.Is(err, ErrIperf) {
		t.Errorf("error document: %v", err)
	}
	if _, err := ParseIperf3([]byte(`{"start":{},"end":{}}`)); err == nil {
		t.Error("unfinished test accepted")
	}
	if _, err := ParseIperf3([]byte(`not json`)); err == nil {
		t.Error("garbage accepted")
	}
}

func TestIperfClientArgs(t *testing.T) {
	got := iperfClientArgs("198.18.1.1", 5201, Load{UDP: true, Streams: 1, Reverse: true}, 3, 1, "100M", 1392)
	want := []string{"-c", "198.18.1.1", "-p", "5201", "-J", "-t", "3", "-O", "1", "--connect-timeout", "5000", "-R", "-u", "-b", "100M", "-l", "1392"}
	if !slices.Equal(got, want) {
		t.Errorf("args = %v", got)
	}
	got = iperfClientArgs("x", 1, Load{Streams: 4}, 30, 2, "", 0)
	if !slices.Contains(got, "-P") || slices.Contains(got, "-u") || slices.Contains(got, "-R") || slices.Contains(got, "-b") {
		t.Errorf("tcp x4 args = %v", got)
	}
	got = iperfClientArgs("x", 1, Load{Streams: 1, Rate: "800M"}, 3, 1, "100M", 1392)
	if i := slices.Index(got, "-b"); i < 0 || got[i+1] != "800M" || slices.Contains(got, "-u") || slices.Contains(got, "-l") {
		t.Errorf("paced tcp args = %v", got)
	}
}

func BenchmarkParseIperf3(b *testing.B) {
	raw := readFixture(b, "iperf3-tcp2-reverse.json")
	for b.Loop() {
		if _, err := ParseIperf3(raw); err != nil {
			b.Fatal(err)
		}
	}
}
