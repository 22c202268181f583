# Application privacy: a real torrent client (Transmission, through the
# stock NixOS module), confined, downloads a torrent created in the test from
# a seeder and tracker on the provider, through the tunnel. The uplink MTU is
# 1300 and the WireGuard MTU 1200 (IPv4): a small-underlay configuration.
{ pkgs, common, net }:
let
  torrentSettings = {
    dht-enabled = false;
    lpd-enabled = false;
    pex-enabled = false;
    utp-enabled = false;
    port-forwarding-enabled = false;
    peer-port = 51413;
    rpc-bind-address = "127.0.0.1";
    download-dir = "/var/lib/transmission/Downloads";
    incomplete-dir-enabled = false;
  };
in
common.mkTest {
  name = "privacy";

  providerArgs = {
    wgMtu = 1200;
    uplinkMtu = 1300;
  };
  providerConfig =
    { pkgs, ... }:
    {
      # The seeder.
      services.transmission = {
        enable = true;
        package = pkgs.transmission_4;
        settings = torrentSettings;
      };
    };

  hostArgs = { uplinkMtu = 1300; };
  hostConfig =
    { pkgs, ... }:
    {
      services.vpnConfinement.namespaces.vpn = {
        ipv6 = "block";
        wireguard.mtu = 1200;
        # Fixed, so the outer UDP port cannot collide with the capture filters.
        wireguard.listenPort = 51821;
        # The seeder may connect to us, too.
        openPorts = [
          {
            port = 51413;
            protocol = "both";
          }
        ];
      };
      # The client, confined: the only change to the stock service.
      services.transmission = {
        enable = true;
        package = pkgs.transmission_4;
        settings = torrentSettings;
      };
      systemd.services.transmission.vpnConfinement = {
        enable = true;
        namespace = "vpn";
      };
    };

  script = ''
    provider.wait_for_unit("tracker.service")
    provider.wait_for_unit("transmission.service")
    host.wait_for_unit("transmission.service")

    with subtest("small underlay: uplink MTU 1300, tunnel MTU 1200"):
        host.succeed("ip link show eth1 | grep -q 'mtu 1300'")
        host.succeed("ip -n vpn link show vc-vpn | grep -q 'mtu 1200'")
        # Transmission really runs inside the namespace.
        pid = host.succeed("systemctl show -P MainPID transmission.service").strip()
        host.succeed(f"test \"$(readlink /proc/{pid}/ns/net)\" = \"net:[$(stat -c %i /run/netns/vpn)]\"")

    with subtest("the provider seeds a freshly created torrent"):
        provider.succeed(
            "head -c 8388608 /dev/urandom > /var/lib/transmission/Downloads/payload",
            "chown transmission:transmission /var/lib/transmission/Downloads/payload",
            "transmission-create -t http://tracker.vpn.test:6969/announce -o /tmp/payload.torrent /var/lib/transmission/Downloads/payload",
        )
        provider.wait_until_succeeds("transmission-remote 127.0.0.1:9091 -l")
        provider.succeed("transmission-remote 127.0.0.1:9091 -a /tmp/payload.torrent")
        # Check the data already in place, then seed it.
        provider.succeed("transmission-remote 127.0.0.1:9091 -t all --verify")
        provider.succeed("transmission-remote 127.0.0.1:9091 -t all --start")
        provider.wait_until_succeeds(
            "transmission-remote 127.0.0.1:9091 -t all -i | grep -q 'Percent Done: 100%'", timeout=120
        )
        provider.wait_until_succeeds(
            "journalctl -u tracker.service -o cat | grep -q 'announce from ${net.tunProvider} '", timeout=120
        )
        expected = provider.succeed("sha256sum /var/lib/transmission/Downloads/payload").split()[0]
        torrent = provider.succeed("base64 -w0 /tmp/payload.torrent").strip()
        host.succeed(f"echo {torrent} | base64 -d > /tmp/payload.torrent")

    with subtest("the confined client downloads it through the tunnel"):
        start_capture(host, "eth1", "privacy")
        host.wait_until_succeeds("ip netns exec vpn transmission-remote 127.0.0.1:9091 -l")
        host.succeed("ip netns exec vpn transmission-remote 127.0.0.1:9091 -a /tmp/payload.torrent")
        host.wait_until_succeeds(
            "ip netns exec vpn transmission-remote 127.0.0.1:9091 -t all -i | grep -q 'Percent Done: 100%'",
            timeout=600,
        )
        stop_capture(host, "privacy")
        # (renamed from payload.part on completion)
        host.wait_until_succeeds("test -f /var/lib/transmission/Downloads/payload")
        got = host.succeed("sha256sum /var/lib/transmission/Downloads/payload").split()[0]
        assert got == expected, f"sha256 {got} != {expected}"

    with subtest("the swarm only ever saw the tunnel address, and nothing else left the host"):
        provider.succeed("journalctl -u tracker.service -o cat | grep -q 'announce from ${net.tunHost} '")
        provider.fail("journalctl -u tracker.service -o cat | grep -q 'announce from ${net.host} '")
        provider.succeed("journalctl -u dns-tunnel.service -o cat | grep -q 'tracker.vpn.test from ${net.tunHost}'")
        leaks = captured(host, "privacy", "port 6969 or port 51413 or port 53 or net 10.100.0.0/24")
        assert leaks == "", f"torrent traffic outside the tunnel:\n{leaks}"
        v6 = captured(host, "privacy", "ip6 and (tcp or udp)")
        assert v6 == "", f"IPv6 traffic on the uplink:\n{v6}"
        assert captured(host, "privacy", WG_BPF) != "", "no WireGuard traffic captured"
  '';
}
