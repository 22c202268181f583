package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	n, err := parseCPULine("cpu  100 5 50 1000 20 3 2 1 7 0")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1000+20+1 { // idle, iowait, steal
		t.Errorf("not busy = %d", n)
	}
	if _, err := parseCPULine("intr 1 2 3"); err == nil {
		t.Error("non-cpu line accepted")
	}
}

func TestProcessCPUReadings(t *testing.T) {
	start, deadline := selfCPU(), time.Now().Add(5*time.Second)
	for selfCPU()-start < 20*time.Millisecond && time.Now().Before(deadline) {
	}
	if d := selfCPU() - start; d < 20*time.Millisecond {
		t.Errorf("selfCPU grew by %s during a 5 s spin", d)
	}
	if s, err := schedstat(os.Getpid()); err != nil || s <= 0 {
		t.Errorf("schedstat(self) = %s, %v", s, err)
	}
	if vmHWM(os.Getpid()) <= 0 {
		t.Error("VmHWM of self unknown")
	}
	if _, cpus, err := machineCPU(); err != nil || cpus < 1 {
		t.Errorf("machineCPU: %d CPUs, %v", cpus, err)
	}
}

func TestICMPEcho(t *testing.T) {
	m := echo(0x1234, 7)
	if icmpChecksum(m) != 0 {
		t.Error("checksum of a checksummed message must verify to 0")
	}
	reply := append([]byte{0, 0}, m[2:]...)
	if id, seq, ok := parseReply(reply); !ok || id != 0x1234 || seq != 7 {
		t.Errorf("parseReply = %x %d %v", id, seq, ok)
	}
	if _, _, ok := parseReply(m); ok {
		t.Error("an echo request is not a reply")
	}
}
