# With nscd running (the NixOS default), a confined `getent` resolves
# through the tunnel's resolver; no DNS leaves on the host's uplink.
{ pkgs, common, net }:
common.mkTest {
  name = "dns";

  hostConfig =
    { ... }:
    {
      services.nscd.enable = true; # the default, made explicit
    };

  script = ''
    with subtest("nscd runs on the host and answers from the uplink resolver"):
        host.wait_for_unit("nscd.service")
        host.succeed("test -S /run/nscd/socket")
        out = host.succeed("getent ahostsv4 target.vpn.test")
        assert "${net.leakAnswer}" in out, f"host lookup: {out!r}"

    with subtest("a confined lookup goes through the tunnel's resolver, not nscd"):
        start_capture(host, "eth1", "dns")
        out = wait_probe(host, "dns")
        stop_capture(host, "dns")
        assert "${net.target}" in out, f"confined lookup: {out!r}"
        assert "${net.leakAnswer}" not in out, f"confined lookup used the host's resolver: {out!r}"
        leaks = captured(host, "dns", "port 53")
        assert leaks == "", f"DNS on the uplink during a confined lookup:\n{leaks}"
        provider.succeed(
            "journalctl -u dns-tunnel.service -o cat | grep -q 'query\\[A\\] target.vpn.test from ${net.tunHost}'"
        )
        provider.fail("journalctl -u dns-uplink.service -o cat | grep -q 'from ${net.tunHost}'")

    with subtest("strict mode: no other resolver is reachable, even through the tunnel"):
        host.fail("systemctl start probe@dns-direct.service")
        provider.fail("journalctl -u dns-uplink.service -o cat | grep -q 'from ${net.tunHost}'")

    with subtest("a running confined service stays masked across an nscd restart"):
        # Issue 12 item 21: nscd's RuntimeDirectory would be removed and recreated
        # at its restart, detaching the confined service's mask; the module sets
        # RuntimeDirectoryPreserve, and the mask covers the directory.
        assert host.succeed("systemctl show -P RuntimeDirectoryPreserve nscd.service").strip() == "yes"
        host.succeed("systemctl restart confined-sleep.service")
        pid = host.succeed("systemctl show -P MainPID confined-sleep.service").strip()
        ino = host.succeed("stat -c %i /run/nscd").strip()
        host.succeed("systemctl restart nscd.service")
        host.wait_for_unit("nscd.service")
        host.succeed("test -S /run/nscd/socket")
        assert host.succeed("stat -c %i /run/nscd").strip() == ino, "nscd's restart replaced /run/nscd"
        host.fail(f"nsenter -t {pid} -m -n -- test -e /run/nscd/socket")
        start_capture(host, "eth1", "nscd-restart")
        out = host.succeed(f"nsenter -t {pid} -m -n -- getent ahostsv4 target.vpn.test")
        stop_capture(host, "nscd-restart")
        assert "${net.target}" in out, f"lookup in the running service after nscd's restart: {out!r}"
        leaks = captured(host, "nscd-restart", "port 53")
        assert leaks == "", f"DNS on the uplink from the running service after nscd's restart:\n{leaks}"

    with subtest("control: the capture does see DNS when the host itself resolves"):
        start_capture(host, "eth1", "control")
        host.succeed("getent ahostsv4 control.vpn.test")
        stop_capture(host, "control")
        assert captured(host, "control", "port 53") != "", "the capture missed the host's own DNS"
  '';
}
