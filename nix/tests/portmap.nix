# Host link: a LAN client in accessibleFrom reaches a confined web server
# through a mapped host port; a LAN machine outside accessibleFrom cannot;
# the namespace cannot open connections over the host link.
{ pkgs, common, net }:
let
  webRoot = pkgs.writeTextDir "index.html" "confined-web-ok\n";
  lanRoot = pkgs.writeTextDir "index.html" "lan-web\n";
in
common.mkTest {
  name = "portmap";

  hostConfig =
    { pkgs, ... }:
    {
      services.vpnConfinement.namespaces.vpn.hostLink = {
        enable = true;
        hostAddress = "10.200.1.1/30";
        namespaceAddress = "10.200.1.2/30";
        accessibleFrom = [ "${net.client}/32" ];
        portMappings = [
          {
            from = 8080;
            to = 8000;
          }
        ];
      };
      systemd.services.confined-web = common.confined "${pkgs.python3}/bin/python3 -m http.server 8000 --bind 0.0.0.0 --directory ${webRoot}";
    };

  nodes.client =
    { pkgs, ... }:
    {
      imports = [ (common.uplink { address = net.client; }) ];
      networking.firewall.allowedTCPPorts = [ 80 ];
      systemd.services.lan-web = {
        wantedBy = [ "multi-user.target" ];
        serviceConfig.ExecStart = "${pkgs.python3}/bin/python3 -m http.server 80 --directory ${lanRoot}";
      };
      environment.systemPackages = [
        pkgs.curl
        pkgs.tcpdump
      ];
    };

  nodes.outsider =
    { pkgs, ... }:
    {
      imports = [ (common.uplink { address = net.outsider; }) ];
      # Even routed straight at the namespace, it must be refused.
      networking.interfaces.eth1.ipv4.routes = [
        {
          address = "10.200.1.0";
          prefixLength = 30;
          via = net.host;
        }
      ];
      environment.systemPackages = [ pkgs.curl ];
    };

  script = ''
    host.wait_for_unit("confined-web.service")
    client.wait_for_unit("lan-web.service")
    client.wait_for_open_port(80)
    outsider.wait_for_unit("multi-user.target")

    with subtest("the host link exists"):
        host.succeed("ip link show vh-vpn")
        host.succeed("ip -n vpn link show vn-vpn")
        host.succeed("nft list table inet vpnc-vpn >/dev/null")
        host.succeed("sysctl -n net.ipv4.ip_forward | grep -qx 1")
        unit = host.succeed("systemctl cat confined-web.service")
        assert "RestrictNetworkInterfaces=" not in unit, unit

    with subtest("an allowed LAN client reaches the confined web server via the mapped host port"):
        client.wait_until_succeeds(
            "curl -sf --max-time 5 http://${net.host}:8080/ | grep -q confined-web-ok", timeout=120
        )

    with subtest("the host reaches it over the veth"):
        host.succeed("curl -sf --max-time 5 http://10.200.1.2:8000/ | grep -q confined-web-ok")

    with subtest("a source outside accessibleFrom cannot"):
        outsider.fail("curl -sf --max-time 5 http://${net.host}:8080/")
        outsider.fail("curl -sf --max-time 5 http://10.200.1.2:8000/")

    with subtest("the namespace cannot open connections over the host link"):
        client.succeed("curl -sf --max-time 5 http://127.0.0.1/ | grep -q lan-web")
        start_capture(client, "eth1", "lan")
        host.fail("systemctl start probe@lan.service")
        stop_capture(client, "lan")
        seen = captured(client, "lan", "tcp port 80")
        assert seen == "", f"the namespace reached the LAN:\n{seen}"

    with subtest("its own traffic still leaves only through the tunnel"):
        assert "client=${net.tunHost}" in wait_probe(host, "http")
  '';
}
