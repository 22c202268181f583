// Command provider is the end-to-end tests' VPN provider: run inside a
// test network namespace, it serves a userspace WireGuard peer plus DNS and
// echo servers (or, without a wireguard section, a decoy that logs every
// hit), optionally a NAT-PMP gateway (config "natpmp"; its "control"
// socket drives it from the tests: provider.DialNATPMP). See
// agent/testbed/provider for the config and log formats.
//
//	provider -config provider.json
//
// It exits 0 on SIGTERM or SIGINT after closing the device and listeners.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

func main() {
	cfgPath := flag.String("config", "", "JSON config (see agent/testbed/provider.Config)")
	flag.Parse()
	if *cfgPath == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: provider -config FILE")
		os.Exit(2)
	}
	cfg, err := provider.LoadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := provider.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}
