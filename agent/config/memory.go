package config

// DefaultPacketBuffers is memory.packetBuffers when omitted: 62 MiB peak
// resident memory under iperf3 load, with the throughput of the unbounded
// data plane (BENCHMARKS.md).
const DefaultPacketBuffers = 256

// Bounds of memory.packetBuffers other than 0 (unbounded): one TUN read
// of a 64 KiB TCP segment is up to 46 packets, and 65536 buffers of 64 KiB
// are 4 GiB.
const (
	MinPacketBuffers = 64
	MaxPacketBuffers = 65536
)

func resolveMemory(c *Config, s *Spec) error {
	s.PacketBuffers = DefaultPacketBuffers
	p := c.Memory.PacketBuffers
	if p == nil {
		return nil
	}
	if n := *p; n != 0 && (n < MinPacketBuffers || n > MaxPacketBuffers) {
		return fieldErr("memory.packetBuffers", "use 64–65536, or 0 for unbounded (default 256)", "%d is out of range", n)
	}
	s.PacketBuffers = *p
	return nil
}
