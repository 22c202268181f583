# Opt-in benchmark (packages.<system>.vpn-benchmark / vpn-benchmark-sustained).
#
# Runs vpn-bench (the benchmark runner, package vpn-bench) in a disposable
# VM. It builds its own synthetic setup inside the guest: a local WireGuard
# peer, the namespace, iperf3 server/clients, and measures the same peer and
# namespace with and without the kill-switch policy (and the direct veth
# path), alternating the order of the modes. It never touches the VM's host firewall and never
# contacts an external VPN; the VM has no host-link interface.
#
# What the numbers mean, and do not mean (see docs/nixos.md): the incremental
# cost of the firewall policy in a synthetic local tunnel on this machine;
# not a commercial VPN, storage, the service sandbox or a torrent swarm. CPU
# is whole-guest CPU from /proc/stat (it includes the local peer and the test
# overhead). One short run is no throughput guarantee.
#
# The tunnel modes run `vpn-agent run` (the vpn-agent package, on PATH) as
# its own process; the reference is stock wireguard-go of the module
# version the agent embeds (vpn-bench-wireguard-go, built by the vpn-bench
# package from the vendored module). The scale workload brings 20 (quick)
# or 100 (sustained) namespaces up, each its own `vpn-agent run`, against
# one local peer.
#
# The failover workload (issue 13) is one of the default workloads, so both
# profiles run it: a pool of two local providers (userspace helper
# processes), `vpn-agent run` (vpn-bench re-executed as the agent's CLI,
# kernel backend here) as its own process, the active provider's WireGuard
# dropped; 3 failovers per scenario (quick) or 7 (sustained).
#
# Result: $out/benchmark.json (and $out/bench.log).
{
  pkgs,
  profile ? "quick",
}:
assert builtins.elem profile [
  "quick"
  "sustained"
];
pkgs.testers.runNixOSTest {
  name = "vpn-benchmark-${profile}";

  # The sustained profile runs 30-second samples with 32 streams.
  globalTimeout = if profile == "sustained" then 4 * 3600 else 3600;

  nodes.machine =
    { pkgs, ... }:
    {
      virtualisation = {
        cores = 2;
        # sustained: 100 agents of the scale workload at once.
        memorySize = if profile == "sustained" then 4096 else 2048;
      };
      boot.kernelModules = [ "wireguard" ];
      services.timesyncd.enable = false;
      environment.systemPackages = with pkgs; [
        vpn-bench
        vpn-agent
        iperf3
        iproute2
        iputils
        nftables
        wireguard-tools
        jq
      ];
    };

  testScript = ''
    machine.wait_for_unit("multi-user.target")
    machine.succeed("mkdir -p /tmp/bench")
    status, _ = machine.execute(
        "vpn-bench --profile ${profile} --backend kernel --out /tmp/bench/benchmark.json"
        " >/tmp/bench/bench.log 2>&1",
        timeout=${toString (if profile == "sustained" then 4 * 3600 - 300 else 3600 - 300)},
    )
    machine.copy_from_vm("/tmp/bench/bench.log", "")
    assert status == 0, "vpn-bench failed; see bench.log in the output"
    machine.succeed("jq -e 'type == \"object\"' /tmp/bench/benchmark.json")
    machine.copy_from_vm("/tmp/bench/benchmark.json", "")
  '';
}
