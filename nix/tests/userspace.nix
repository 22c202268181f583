# The basic scenario with backend = "userspace" (wireguard-go in the agent)
# on a host where the wireguard kernel module cannot be loaded, configured
# from a wg-quick file.
{ pkgs, common, net }:
let
  inherit (common) keys;
  wgQuick = ''
    [Interface]
    PrivateKey = ${keys.host.private}
    Address = ${net.tunHost}/32
    DNS = ${net.tunProvider}

    [Peer]
    PublicKey = ${keys.provider.public}
    Endpoint = ${net.provider}:${toString net.wgPort}
    AllowedIPs = 0.0.0.0/0, ::/0
    PersistentKeepalive = 5
  '';
in
common.mkTest {
  name = "userspace";

  hostConfig =
    { pkgs, ... }:
    {
      boot.blacklistedKernelModules = [ "wireguard" ];
      boot.extraModprobeConfig = ''
        install wireguard ${pkgs.coreutils}/bin/false
      '';
      environment.etc."vpn-test/wg.conf" = {
        text = wgQuick;
        mode = "0600";
      };
      services.vpnConfinement.namespaces.vpn = {
        backend = "userspace";
        wireguard = {
          configFile = "/etc/vpn-test/wg.conf";
          # Everything comes from the file.
          privateKeyFile = null;
          addresses = [ ];
          peers = [ ];
        };
        dns.servers = [ ];
      };
    };

  script = ''
    with subtest("no kernel WireGuard on the host"):
        host.fail("modprobe wireguard")
        host.succeed("test ! -e /sys/module/wireguard")

    with subtest("the userspace tunnel lives in the namespace"):
        host.succeed("ip -n vpn -d link show vc-vpn | grep -qw tun")
        host.succeed("test -S /var/run/wireguard/vc-vpn.sock")
        host.succeed("grep -q 'nameserver ${net.tunProvider}' /etc/netns/vpn/resolv.conf")

    with subtest("a confined service reaches the target through the tunnel, and only so"):
        start_capture(host, "eth1", "userspace")
        assert "client=${net.tunHost}" in wait_probe(host, "http")
        assert "${net.target}" in probe(host, "dns")
        stop_capture_no_leaks(host, "userspace")
        host.succeed("ip netns exec vpn wg show vc-vpn latest-handshakes | awk '{ exit !($2 > 0) }'")

    with subtest("an unconfined service is unaffected"):
        assert "client=${net.host}" in probe(host, "http", unit="plainprobe")

    with subtest("the kill switch holds when the userspace tunnel dies with the agent"):
        crash_agent(host)
        assert "client=${net.tunHost}" in wait_probe(host, "http")
  '';
}
