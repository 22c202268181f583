package bench

import (
	"encoding/json"
	"time"
)

// SchemaVersion identifies the benchmark.json layout. 2: the agent
// modes' data plane is a vpn-agent process (cpu.agentSec and
// agentVmHWMKiB are its; the bench's own are benchSec and
// benchVmHWMKiB), binaries, agents and scale were added.
const SchemaVersion = "vpn-confinement.bench/2"

// Result is benchmark.json.
type Result struct {
	Schema      string    `json:"schema"`
	Tool        string    `json:"tool"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`
	Interrupted bool      `json:"interrupted,omitempty"`
	Error       string    `json:"error,omitempty"`

	Host     HostInfo    `json:"host"`
	Binaries Binaries    `json:"binaries"`
	Settings Settings    `json:"settings"`
	Topology Topology    `json:"topology"`
	Shaping  ShapingInfo `json:"shaping"`

	// Agents are the `vpn-agent run` processes the tunnel modes ran
	// through.
	Agents  []AgentRun `json:"agents,omitempty"`
	Samples []Sample   `json:"samples"`
	UpDown  *UpDown    `json:"upDown,omitempty"`
	// Scale brings many namespaces up against one peer.
	Scale *Scale `json:"scale,omitempty"`
	// Failover times the agent's failover across a pool of two servers.
	Failover *Failover `json:"failover,omitempty"`
	Modes    []ModeEnd `json:"modes"` // per mode: nft counters captured after the mode's last sample

	Summary []Summary `json:"summary"`
	Paired  []Paired  `json:"paired"`
	Targets []Target  `json:"targets"`
	Notes   []string  `json:"notes"`
}

// HostInfo describes the machine the numbers come from.
type HostInfo struct {
	Kernel         string    `json:"kernel"`
	KernelVersion  string    `json:"kernelVersion"`
	Arch           string    `json:"arch"`
	CPUModel       string    `json:"cpuModel"`
	CPUs           int       `json:"cpus"`
	GoVersion      string    `json:"goVersion"`
	Iperf3Version  string    `json:"iperf3Version"`
	WireGuardGo    string    `json:"wireguardGoVersion,omitempty"` // the same-version stock binary (reference mode)
	AgentVersion   string    `json:"agentVersion,omitempty"`
	LoadAvgStart   []float64 `json:"loadAvgStart"` // 1, 5, 15 minutes
	LoadAvgEnd     []float64 `json:"loadAvgEnd"`
	BackendAsked   string    `json:"backendRequested"`
	Backend        string    `json:"backend"` // resolved: kernel or userspace
	KernelWGReason string    `json:"kernelWireGuard"`
}

// Binaries are the programs the run measured, with their versions.
type Binaries struct {
	// EmbeddedWireGuard is the wireguard-go module version linked into
	// the bench (and so into the agent it re-executes, or an agent of the
	// same build).
	EmbeddedWireGuard string  `json:"embeddedWireguardModule"`
	Agent             *Binary `json:"agent"`
	// Reference is stock wireguard-go of the same module version
	// (ModeReference); SystemReference the wireguard-go on PATH when it
	// is another version (ModeSystemRef).
	Reference        *Binary `json:"reference,omitempty"`
	SystemReference  *Binary `json:"systemReference,omitempty"`
	ReferenceMissing string  `json:"referenceMissing,omitempty"`
}

// AgentRun is one `vpn-agent run` process of the run.
type AgentRun struct {
	Name      string   `json:"name"`
	Modes     []Mode   `json:"modes"`
	Namespace string   `json:"namespace"`
	PID       int      `json:"pid"`
	Args      []string `json:"args"`
	// Fragment is the JSON merged into its config (ModeUnbounded).
	Fragment string  `json:"configFragment,omitempty"`
	ReadyMs  float64 `json:"readyMs"` // process start to READY=1
	// Idle: after the handshake, before any workload.
	IdleRSSKiB  int64 `json:"idleRssKiB"`
	IdleAnonKiB int64 `json:"idleRssAnonKiB"` // of it anonymous (heap, stacks); the rest is mostly the binary's pages
	IdlePSSKiB  int64 `json:"idlePssKiB"`     // proportional set size: shared pages divided among their sharers
	IdleHWMKiB  int64 `json:"idleVmHWMKiB"`
}

// Settings are the run parameters after profile defaults.
type Settings struct {
	Profile          string   `json:"profile"`
	Modes            []Mode   `json:"modes"`
	Samples          int      `json:"samples"`
	DurationSec      int      `json:"durationSec"`
	OmitSec          int      `json:"omitSec"`
	Streams          []int    `json:"streams"`
	UDPRate          string   `json:"udpRate"`
	TCPPace          string   `json:"tcpPace,omitempty"` // iperf3 -b of the paced TCP workloads
	UDPLen           int      `json:"udpLen"`
	PingIntervalMs   float64  `json:"pingIntervalMs"`
	UpDownCycles     int      `json:"upDownCycles"`
	FailoverSamples  int      `json:"failoverSamples,omitempty"`
	ScaleN           int      `json:"scaleNamespaces,omitempty"`
	UnboundedConfig  string   `json:"unboundedConfigFragment,omitempty"`
	FailoverProbeSec float64  `json:"failoverProbeIntervalSec,omitempty"`
	Workloads        []string `json:"workloads"`
	TunnelMTU        int      `json:"tunnelMtu"`
	ClockTicksPerS   int      `json:"procStatTicksPerSec"`
	FreshIperf3Srv   bool     `json:"freshIperf3ServerPerSample"`
	ProberKind       string   `json:"prober"`
	RequestResponse  string   `json:"requestResponse"`
	// The failover's stream-probe interval, standby A/B and shaping.
	FailoverStreamProbeSec float64 `json:"failoverStreamProbeIntervalSec,omitempty"`
	FailoverStandby        string  `json:"failoverStandby,omitempty"`
	FailoverShaping        string  `json:"failoverShaping,omitempty"`
}

// Topology records the namespaces and the interfaces' diagnostics
// (MTU, qdisc, offloads) as they were during the run.
type Topology struct {
	ID         string            `json:"id"`
	Namespaces map[string]string `json:"namespaces"` // role -> name
	Targets    map[Mode]string   `json:"targets"`    // server address per mode
	ClientNS   map[Mode]string   `json:"clientNamespace"`
	Peer       string            `json:"peer"` // what runs the provider's WireGuard
	Interfaces []IfaceInfo       `json:"interfaces"`
}

// IfaceInfo is one interface's diagnostics.
type IfaceInfo struct {
	Namespace  string          `json:"namespace"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	MTU        int             `json:"mtu"`
	Qdisc      string          `json:"qdisc"`
	GSOMaxSize uint32          `json:"gsoMaxSize,omitempty"`
	GROMaxSize uint32          `json:"groMaxSize,omitempty"`
	Offloads   map[string]bool `json:"offloads,omitempty"` // ethtool legacy flags
	Note       string          `json:"note,omitempty"`
}

// ShapingInfo says whether shaped-link scenarios ran, and why not.
type ShapingInfo struct {
	Available bool     `json:"available"`
	Reason    string   `json:"reason"`
	Scenarios []string `json:"scenarios,omitempty"`
}

// Sample is one measurement of one workload in one mode.
type Sample struct {
	Workload string    `json:"workload"`
	Kind     Kind      `json:"kind"`
	Mode     Mode      `json:"mode"`
	Round    int       `json:"round"`
	Seq      int       `json:"seq"` // position in the whole run
	Start    time.Time `json:"start"`

	Iperf      *IperfResult `json:"iperf,omitempty"`
	PingLoaded *Latency     `json:"pingUnderLoad,omitempty"`
	Ping       *Latency     `json:"ping,omitempty"` // idle
	RR         *RRResult    `json:"rr,omitempty"`
	CPU        *CPU         `json:"cpu,omitempty"`
	AgentHWM   int64        `json:"agentVmHWMKiB,omitempty"` // peak RSS of the mode's vpn-agent process during the sample
	BenchHWM   int64        `json:"benchVmHWMKiB,omitempty"` // ... of the bench process (probers)
	// DataplaneRSSStart is the data plane's VmRSS when the sample began
	// (where its VmHWM was reset to): a Go process gives memory back
	// slowly, so a sample's peak is at least what earlier ones left.
	DataplaneRSSStart int64           `json:"dataplaneRssStartKiB,omitempty"`
	RefHWM            int64           `json:"referenceVmHWMKiB,omitempty"`
	PeerHWM           int64           `json:"peerVmHWMKiB,omitempty"`
	NFT               *NFTSnapshot    `json:"nft,omitempty"`
	Raw               json.RawMessage `json:"iperf3,omitempty"` // the client's raw iperf3 JSON
	Error             string          `json:"error,omitempty"`
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	P50      float64 `json:"p50Ms"`
	P95      float64 `json:"p95Ms"`
	P99      float64 `json:"p99Ms"`
	Max      float64 `json:"maxMs"`
}

// RRResult is a TCP request/response run.
type RRResult struct {
	MsgBytes     int     `json:"msgBytes"`
	Transactions int     `json:"transactions"`
	PerSecond    float64 `json:"perSecond"`
	P50us        float64 `json:"p50Us"`
	P99us        float64 `json:"p99Us"`
	MaxUs        float64 `json:"maxUs"`
}

// CPU is the CPU used during a sample. Machine figures come from
// /proc/stat and include everything on the machine (the peer, iperf3,
// the bench's probers and anything else running); per-process figures
// come from /proc/<pid>/task/*/schedstat (getrusage for the bench
// itself, which includes exited threads).
type CPU struct {
	WallSec        float64  `json:"wallSec"`
	MachineBusySec float64  `json:"machineBusySec"`
	MachineUtilPct float64  `json:"machineUtilPct"`     // of all CPUs
	BenchSec       float64  `json:"benchSec"`           // the bench process: probers, iperf3 and process management
	AgentSec       *float64 `json:"agentSec,omitempty"` // the mode's vpn-agent process (agent modes): the embedded data plane
	PeerSec        *float64 `json:"peerSec,omitempty"`
	ReferenceSec   *float64 `json:"referenceSec,omitempty"` // stock wireguard-go, reference mode
	// DataplaneSec is the client side's data plane: the vpn-agent
	// process in agent modes (it holds the embedded wireguard-go), the
	// stock process in reference modes; none in direct mode.
	DataplaneSec *float64 `json:"dataplaneSec,omitempty"`
	ClientSec    float64  `json:"iperf3ClientSec"`
	ServerSec    float64  `json:"iperf3ServerSec"`
	MovedGB      float64  `json:"movedGB"` // 1e9 bytes, whole client run
	// OtherSec is machine CPU not used by any tracked process: kernel
	// threads (softirq, kworkers) and anything else running on the
	// machine. A large value means the sample shared the CPUs with
	// foreign work (tick granularity makes small negative values).
	OtherSec float64 `json:"otherSec"`
	// CPU-seconds per GB moved.
	MachinePerGB   float64 `json:"machineSecPerGB,omitempty"`
	ProcessesPerGB float64 `json:"processesSecPerGB,omitempty"` // agent + peer + reference + iperf3
	DataplanePerGB float64 `json:"dataplaneSecPerGB,omitempty"` // agent (tunnel modes) or stock process (reference)
}

// NFTSnapshot is the kill-switch table read back after a sample.
type NFTSnapshot struct {
	Loaded   bool              `json:"loaded"`
	Rules    int               `json:"rules,omitempty"`
	Counters map[string]uint64 `json:"counterPackets,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// ModeEnd is a mode's state after its last sample.
type ModeEnd struct {
	Mode Mode         `json:"mode"`
	NFT  *NFTSnapshot `json:"nft,omitempty"`
}

// UpDown times bringing a confined namespace up (to a ready tunnel with
// the kill switch loaded, handshake excluded) and down again.
type UpDown struct {
	Cycles   int                `json:"cycles"`
	Paths    map[string]*UDPath `json:"paths"` // "agent", "shell"
	Skipped  string             `json:"skipped,omitempty"`
	StepsDoc string             `json:"steps"`
}

// UDPath is one way of doing up/down.
type UDPath struct {
	Description string               `json:"description"`
	UpMs        []float64            `json:"upMs"`
	DownMs      []float64            `json:"downMs"`
	Up          Dist                 `json:"up"`
	Down        Dist                 `json:"down"`
	StepMs      map[string][]float64 `json:"stepMs,omitempty"` // agent: engine.Up per step
	StepMedian  map[string]float64   `json:"stepMedianMs,omitempty"`
	// ReclaimMs (agent) is, per cycle, the time from the start of
	// engine.Teardown until the kernel had removed the tunnel interface
	// (Instance.Reclaimed): down plus the link's unregistering, which
	// Teardown leaves running in the background for a userspace TUN.
	ReclaimMs []float64 `json:"reclaimMs,omitempty"`
	Reclaim   *Dist     `json:"reclaim,omitempty"`
}

// Summary is one workload x mode x metric.
type Summary struct {
	Workload string `json:"workload"`
	Mode     Mode   `json:"mode"`
	Metric   string `json:"metric"`
	Unit     string `json:"unit"`
	Dist
}

// Target is one performance target and whether this run met it.
type Target struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Limit  string  `json:"limit"`
	Met    bool    `json:"met"`
	Detail string  `json:"detail"`
}
