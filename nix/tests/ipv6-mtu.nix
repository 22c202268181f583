# 256 KiB over IPv6 through a WireGuard interface with MTU 1280 (the IPv6
# minimum). This proves a small-MTU transfer, not every ICMP/PMTU failure.
{ pkgs, common, net }:
common.mkTest {
  name = "ipv6-mtu";

  providerArgs = { wgMtu = 1280; };
  hostConfig =
    { ... }:
    {
      services.vpnConfinement.namespaces.vpn = {
        backend = "kernel";
        ipv6 = "tunnel";
        wireguard = {
          addresses = [
            "${net.tunHost}/32"
            "${net.tunHost6}/128"
          ];
          mtu = 1280;
        };
      };
    };

  script = ''
    provider.wait_for_unit("make-blob.service")

    with subtest("the tunnel has MTU 1280 and an IPv6 address"):
        host.succeed("ip -n vpn link show vc-vpn | grep -q 'mtu 1280'")
        host.succeed("ip -n vpn -6 addr show dev vc-vpn | grep -q '${net.tunHost6}'")
        host.succeed("lsmod | grep -qw wireguard")  # backend = kernel

    with subtest("256 KiB over IPv6 arrive intact"):
        size = provider.succeed("stat -c %s /srv/www/blob").strip()
        assert size == "262144", size
        expected = provider.succeed("sha256sum /srv/www/blob").split()[0]
        got = wait_probe(host, "v6").split()[0]
        assert got == expected, f"sha256 {got} != {expected}"
        provider.succeed(
            "journalctl -u echo-http.service -o cat | grep -q '^${net.tunHost6} .*GET /blob'"
        )

    with subtest("IPv6 names and IPv4 still work"):
        assert "${net.target6}" in probe(host, "dns6")
        assert "client=${net.tunHost}" in probe(host, "http")
  '';
}
