package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const prefix = "vpn_confinement_"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prefix+name, help, append([]string{"namespace"}, labels...), nil)
}

var (
	descUp = desc("up",
		"1 when the latest health check of the namespace found nothing wrong, 0 otherwise (or before the first check).")
	descHandshake = desc("tunnel_last_handshake_timestamp_seconds",
		"Unix time of the latest WireGuard handshake with any peer of the tunnel (absent before the first).")
	descRx = desc("tunnel_receive_bytes_total",
		"Bytes received through the WireGuard tunnel, summed over its peers (resets when the tunnel is rebuilt).")
	descTx = desc("tunnel_transmit_bytes_total",
		"Bytes sent through the WireGuard tunnel, summed over its peers (resets when the tunnel is rebuilt).")
	descKill = desc("killswitch_packets_total",
		"Packets counted by the kill switch's named nftables counters (resets when the table is replaced).", "counter")
	descRepairs = desc("repairs_total",
		"Successful repairs by the agent, by kind of problem repaired.", "kind")
	descFailovers = desc("failovers_total",
		"Failovers from one server of the pool to another.")
	descServer = desc("server_info",
		"The active server: its wg-quick config file (empty for structured options) and peer endpoint(s); value 1.", "config_file", "endpoint")
	descRecovery = desc("recovery_state",
		"The failover loop's state: 1 for the current one of healthy, retrying, failing_over and every_server_dead (the pool tried in full; the namespace stays closed), 0 for the others (absent before the first check).", "state")
	descProbe = desc("probe_failures_total",
		"Failed health probes through the tunnel.")
	descProbeEarly = desc("probes_early_total",
		"Health probes sent before their tick because the tunnel sent and received nothing for a whole check (the passive trigger; at most one per probe interval).")
	descStandbyServer = desc("standby_server",
		"The warm standby's index in the pool (issue 25), -1 when there is none (present only with a pool of more than one server).")
	descStandbyWarm = desc("standby_warm",
		"1 when the warm standby handshook since it was armed and its session can carry data, 0 otherwise.")
	descStandbyHandshake = desc("standby_last_handshake_timestamp_seconds",
		"Unix time of the latest WireGuard handshake with the standby's peer, as the device reports it (absent before the first).")
	descMovesBack = desc("moves_back_total",
		"Moves back to the pool's first server (health.preferFirst).")
	descFwdPort = desc("forwarded_port",
		"The port the provider forwards to the namespace (NAT-PMP), open in the kill switch while its lease lives; 0 when there is none (present only with portForwarding).")
	descFwdAnswering = desc("port_forwarding_gateway_answering",
		"1 when the NAT-PMP gateway granted the latest request, 0 when it failed or did not answer.")
	descFwdRequests = desc("port_forwarding_requests_total",
		"Mapping requests sent to the NAT-PMP gateway (one per protocol and renewal).")
	descFwdFailures = desc("port_forwarding_request_failures_total",
		"Mapping requests that failed or were not answered.")
	descFwdPending = desc("port_forwarding_pending_pushes",
		"Applications the forwarded port is not handed to yet (retried with backoff).")
)

// collector turns one snapshot into samples at scrape time.
type collector struct{ m *Metrics }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descHandshake, descRx, descTx, descKill, descRepairs, descFailovers, descServer, descRecovery, descProbe, descProbeEarly,
		descStandbyServer, descStandbyWarm, descStandbyHandshake, descMovesBack, descFwdPort, descFwdAnswering, descFwdRequests, descFwdFailures, descFwdPending} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m, ns := c.m, c.m.name
	s := m.Snapshot()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{ns}, l...)...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{ns}, l...)...)
	}
	up := 0.0
	if r := s.Report; r != nil {
		if r.Healthy() {
			up = 1
		}
		if len(r.Peers) > 0 {
			var rx, tx int64
			var last, standby float64
			for _, p := range r.Peers {
				if p.Standby {
					// The warm standby carries nothing: its own gauge.
					if p.LatestHandshake != nil {
						standby = max(standby, float64(p.LatestHandshake.UnixNano())/1e9)
					}
					continue
				}
				rx += p.RxBytes
				tx += p.TxBytes
				if p.LatestHandshake != nil {
					if t := float64(p.LatestHandshake.UnixNano()) / 1e9; t > last {
						last = t
					}
				}
			}
			counter(descRx, float64(rx))
			counter(descTx, float64(tx))
			if last > 0 {
				gauge(descHandshake, last)
			}
			if standby > 0 {
				gauge(descStandbyHandshake, standby)
			}
		}
		names := make([]string, 0, len(r.Policy.Drops))
		for n := range r.Policy.Drops {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			counter(descKill, float64(r.Policy.Drops[n]), n)
		}
	}
	gauge(descUp, up)
	for k, n := range kindNames {
		counter(descRepairs, float64(m.repairs[k].Load()), n)
	}
	counter(descFailovers, float64(m.failovers.Load()))
	counter(descProbe, float64(m.probeFails.Load()))
	counter(descProbeEarly, float64(m.probesEarly.Load()))
	if s.Recovery != "" {
		for _, r := range recoveryStates {
			v := 0.0
			if r.state == s.Recovery {
				v = 1
			}
			gauge(descRecovery, v, r.label)
		}
	}
	if sb := s.Standby; sb != nil {
		warm := 0.0
		if sb.Warm {
			warm = 1
		}
		gauge(descStandbyServer, float64(sb.Server))
		gauge(descStandbyWarm, warm)
		counter(descMovesBack, float64(sb.MovesBack))
	}
	if pf := s.PortForward; pf != nil {
		gauge(descFwdPort, float64(pf.Port))
		answering := 0.0
		if pf.Error == "" && pf.Requests > 0 {
			answering = 1
		}
		gauge(descFwdAnswering, answering)
		counter(descFwdRequests, float64(pf.Requests))
		counter(descFwdFailures, float64(pf.Failures))
		gauge(descFwdPending, float64(len(pf.Pending)))
	}
	if s.Server >= 0 && s.Server < len(m.servers) {
		sv := m.servers[s.Server]
		gauge(descServer, 1, sv.configFile, sv.endpoint)
	}
}

// Registry is a registry of m's metrics alone, with the agent process's
// Go runtime and process metrics (no global state).
func (m *Metrics) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
