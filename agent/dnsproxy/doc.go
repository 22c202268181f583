// Package dnsproxy is the sidecar's DNS forwarder (issue 23 item 2): it
// serves DNS on a loopback address inside the pod's network namespace
// and sends each query to exactly one place.
//
//   - A name at or under one of Config.ClusterDomains (on label
//     boundaries, case-insensitively: svc.cluster.local is under
//     cluster.local; evilcluster.local, cluster.local.example.com and a
//     label "x.cluster" holding an escaped dot are not) goes to the cluster
//     resolver, Config.ClusterServer, and nowhere else: when it does not
//     answer, the client gets SERVFAIL, never a tunnel resolver's answer.
//   - Every other name goes only to the active server's resolvers
//     (Config.Upstreams, read for each query, so a failover takes effect
//     with the next query), tried in order, each with Config.Timeout. The
//     agent dials them normally; the sidecar's routing sends them through
//     the tunnel and its kill switch refuses them anywhere else.
//   - What is not one plain query (not exactly one question, answer or
//     authority records, additional records other than one OPT, a class
//     other than IN, zone transfers and meta types, an opcode other than
//     QUERY) is answered here (FORMERR, REFUSED or NOTIMP) and goes
//     nowhere. Datagrams that are no query (shorter than a header, or
//     responses) get no answer.
//
// The wire format is miekg/dns's: the forwarder parses every query with
// it, judges the parsed question and forwards a message it packed itself
// (the client's question and OPT record, a fresh random ID; the answer
// carries the client's ID again). UDP queries go upstream over UDP and
// are asked again over TCP when the answer is truncated; TCP queries go
// over TCP. An answer larger than the client's UDP size (512, or its EDNS
// size) is truncated with TC set, so the client asks again over TCP.
//
// Bounds: at most MaxInFlight queries are being answered at once (a query
// beyond that gets SERVFAIL at once) and at most MaxTCPConns TCP
// connections are open (one beyond that is closed); each in-flight query
// holds at most two 64 KiB messages. Query names are logged at Debug
// only, never at Info or above.
//
// # What to put in the app's resolv.conf
//
// Kubernetes (dnsPolicy: None, dnsConfig) or compose (dns:, dns_search:,
// dns_opt:) write the app container's resolv.conf. Point it at the
// forwarder and nothing else:
//
//	nameserver 127.0.0.1
//	search <namespace>.svc.cluster.local svc.cluster.local cluster.local
//	options ndots:1
//
// The resolver library expands names with the search list before the
// forwarder sees them, so an expanded internet name, such as
// example.com.default.svc.cluster.local, is a cluster name and goes to
// the cluster resolver: its first labels tell the cluster resolver which
// internet name the app looked up. Kubernetes' default ndots:5 does that
// for every internet name with fewer than five dots, before the name is
// tried as it is. With ndots:1, a name with a dot is tried as it is first
// (through the tunnel) and only a name that does not exist there is tried
// with the search suffixes (glibc; musl never uses the search list for a
// name with at least ndots dots); a name without a dot (a service in the
// pod's own namespace) is tried with the suffixes first. For no expansion
// at all, leave the search line out and use full names
// (web.default.svc.cluster.local): then no internet name, found or not,
// ever reaches the cluster resolver. A partial name with a dot, like
// web.other (service.namespace), is with ndots:1 first asked as it is,
// through the tunnel (whose resolver answers NXDOMAIN, and learns the
// partial name), then with the suffixes: use full names for services in
// other namespaces. Reverse lookups of cluster addresses
// (PTR under in-addr.arpa) go through the tunnel unless their zone, e.g.
// 43.10.in-addr.arpa, is one of the cluster domains.
package dnsproxy
