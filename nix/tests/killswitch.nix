# With the tunnel broken the confined service reaches nothing and nothing
# of it appears on the uplink; a crashed agent leaves the kill switch in
# place; stopping the agent stops the confined services (BindsTo=).
{ pkgs, common, net }:
common.mkTest {
  name = "killswitch";

  script = ''
    host.wait_for_unit("confined-sleep.service")
    assert "client=${net.tunHost}" in wait_probe(host, "http")

    with subtest("the provider drops all WireGuard packets: the confined service reaches nothing"):
        provider.succeed(
            "nft add table inet outage",
            "nft 'add chain inet outage input { type filter hook input priority -300; policy accept; }'",
            "nft add rule inet outage input udp dport ${toString net.wgPort} drop",
        )
        start_capture(host, "eth1", "outage")
        host.fail("systemctl start probe@http.service")
        host.fail("systemctl start probe@uplink.service")
        host.fail("systemctl start probe@dns.service")
        host.fail("systemctl start probe@dns-direct.service")
        stop_capture_no_leaks(host, "outage")
        # The uplink resolver never heard from the namespace.
        provider.fail("journalctl -u dns-uplink.service -o cat | grep -q 'from ${net.tunHost}'")

    with subtest("the tunnel recovers"):
        provider.succeed("nft delete table inet outage")
        assert "client=${net.tunHost}" in wait_probe(host, "http")

    with subtest("a crashed agent leaves the kill switch and namespace in place"):
        # Restart=on-failure brings it back (and it adopts the namespace).
        crash_agent(host)
        assert "client=${net.tunHost}" in wait_probe(host, "http")

    with subtest("stopping the agent stops the confined services"):
        host.succeed("systemctl start confined-sleep.service")
        host.succeed("systemctl is-active confined-sleep.service")
        host.succeed("systemctl stop vpn-agent-vpn.service")
        host.fail("systemctl is-active confined-sleep.service")
        host.succeed("test ! -e /run/netns/vpn")
        host.fail("ip link show vc-vpn")

    with subtest("starting a confined service brings its namespace back"):
        host.succeed("systemctl start confined-sleep.service")
        host.succeed("systemctl is-active vpn-agent-vpn.service")
        assert "client=${net.tunHost}" in wait_probe(host, "http")
  '';
}
