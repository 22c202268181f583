package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// IperfResult is what the bench reads from one iperf3 client's JSON
// (iperf3 -J). Rates are receiver-side over the measured interval (the
// warm-up seconds given to -O are excluded by iperf3 itself).
type IperfResult struct {
	Protocol string `json:"protocol"`
	Streams  int    `json:"streams"`
	Reverse  bool   `json:"reverse"`
	Omit     int    `json:"omitSec"`
	Duration int    `json:"durationSec"`
	BlockLen int    `json:"blockLen"`

	BitsPerSecond float64 `json:"bitsPerSecond"` // received, measured interval
	Bytes         int64   `json:"bytes"`         // received, measured interval
	// MovedBytes adds the omitted warm-up intervals (the client's view):
	// the bytes moved while CPU was being measured for the whole client run.
	MovedBytes  int64 `json:"movedBytes"`
	Retransmits int64 `json:"retransmits"` // TCP, sender side

	// UDP only, as reported by the receiver.
	JitterMs    float64 `json:"jitterMs,omitempty"`
	LostPackets int64   `json:"lostPackets,omitempty"`
	Packets     int64   `json:"packets,omitempty"`
	LostPercent float64 `json:"lostPercent,omitempty"`

	// iperf3's own CPU fields describe the iperf3 processes only, never
	// the tunnel's cost. Kept for completeness.
	IperfHostCPUPct   float64 `json:"iperfHostCpuPct"`
	IperfRemoteCPUPct float64 `json:"iperfRemoteCpuPct"`
}

// iperfSum is one "sum" object of iperf3's JSON.
type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         int64   `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int64   `json:"retransmits"`
	JitterMs      float64 `json:"jitter_ms"`
	LostPackets   int64   `json:"lost_packets"`
	Packets       int64   `json:"packets"`
	LostPercent   float64 `json:"lost_percent"`
	Omitted       bool    `json:"omitted"`
}

type iperfDoc struct {
	Error string `json:"error"`
	Start struct {
		Version   string `json:"version"`
		TestStart struct {
			Protocol   string `json:"protocol"`
			NumStreams int    `json:"num_streams"`
			BlkSize    int    `json:"blksize"`
			Omit       int    `json:"omit"`
			Duration   int    `json:"duration"`
			Reverse    int    `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	Intervals []struct {
		Sum iperfSum `json:"sum"`
	} `json:"intervals"`
	End struct {
		SumSent     *iperfSum `json:"sum_sent"`
		SumReceived *iperfSum `json:"sum_received"`
		CPU         struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
}

// ErrIperf is wrapped by errors iperf3 itself reported in its JSON.
var ErrIperf = errors.New("iperf3 reported an error")

// ParseIperf3 reads an iperf3 3.x client JSON document.
func ParseIperf3(raw []byte) (*IperfResult, error) {
	var d iperfDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("parse iperf3 JSON: %w", err)
	}
	if d.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrIperf, d.Error)
	}
	if d.End.SumReceived == nil {
		return nil, errors.New("parse iperf3 JSON: no end.sum_received (test did not finish)")
	}
	ts := d.Start.TestStart
	r := &IperfResult{
		Protocol: ts.Protocol, Streams: ts.NumStreams, Reverse: ts.Reverse != 0,
		Omit: ts.Omit, Duration: ts.Duration, BlockLen: ts.BlkSize,
		BitsPerSecond:     d.End.SumReceived.BitsPerSecond,
		Bytes:             d.End.SumReceived.Bytes,
		IperfHostCPUPct:   d.End.CPU.HostTotal,
		IperfRemoteCPUPct: d.End.CPU.RemoteTotal,
	}
	for _, iv := range d.Intervals {
		r.MovedBytes += iv.Sum.Bytes
	}
	if d.End.SumSent != nil {
		r.Retransmits = d.End.SumSent.Retransmits
	}
	if ts.Protocol == "UDP" {
		s := d.End.SumReceived
		r.JitterMs, r.LostPackets, r.Packets, r.LostPercent = s.JitterMs, s.LostPackets, s.Packets, s.LostPercent
	}
	return r, nil
}

// iperfClientArgs returns the iperf3 client arguments for a load.
func iperfClientArgs(target string, port int, l Load, durSec, omitSec int, udpRate string, udpLen int) []string {
	a := []string{"-c", target, "-p", strconv.Itoa(port), "-J",
		"-t", strconv.Itoa(durSec), "-O", strconv.Itoa(omitSec),
		"--connect-timeout", "5000"}
	if l.Streams > 1 {
		a = append(a, "-P", strconv.Itoa(l.Streams))
	}
	if l.Reverse {
		a = append(a, "-R")
	}
	switch {
	case l.UDP:
		a = append(a, "-u", "-b", udpRate, "-l", strconv.Itoa(udpLen))
	case l.Rate != "":
		a = append(a, "-b", l.Rate)
	}
	return a
}
