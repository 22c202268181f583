# The sidecar image (docs/sidecar.md): the static vpn-agent and nothing
# else, for Kubernetes (dist/kubernetes) and compose (dist/compose).
#
#   nix build .#image && podman load < result
#
# loads localhost/vpn-agent:latest, the name the manifests use; dist/image's
# Containerfile builds the same image without Nix. The binary is static
# (nix/package.nix builds with CGO_ENABLED=0): the image needs no libc, no
# /etc files and no shell. The manifests mount /run and /var/run (state,
# userspace WireGuard's control socket) and the config, and give the
# container /dev/net/tun for the userspace backend.
{
  dockerTools,
  vpn-agent,
}:
dockerTools.buildLayeredImage {
  name = "localhost/vpn-agent";
  tag = "latest";
  config = {
    Entrypoint = [ "${vpn-agent}/bin/vpn-agent" ];
    Cmd = [
      "run"
      "--config"
      "/etc/vpn-confinement/config/sidecar.json"
    ];
    Labels = {
      "org.opencontainers.image.title" = "vpn-agent";
      "org.opencontainers.image.description" = vpn-agent.meta.description;
      "org.opencontainers.image.source" = vpn-agent.meta.homepage;
      "org.opencontainers.image.version" = vpn-agent.version;
    };
  };
}
