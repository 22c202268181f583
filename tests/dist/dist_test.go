// Package dist checks the shipped sidecar examples offline (issue 23 item
// 4): dist/kubernetes/pod.yaml and dist/compose parse into the fields
// Kubernetes and compose define (unknown fields fail), the agent config
// they carry passes `vpn-agent validate --static`, and the names, paths
// and ports that appear in several places (the images, the config path,
// the metrics port and the probes, the wg-quick file's mount, the allowed
// subnets) agree with each other and with the image definitions
// (dist/image/Containerfile, nix/image.nix).
package dist

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// root is the repository, two levels up from this package.
const root = "../.."

// agentBin is a static vpn-agent (CGO_ENABLED=0, as the images hold),
// built by TestMain.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vpnc-dist")
	if err != nil {
		panic(err)
	}
	agentBin = filepath.Join(dir, "vpn-agent")
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "build", "-trimpath", "-o", agentBin, "./agent/cmd/vpn-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build vpn-agent: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The Kubernetes fields the example uses (k8s.io/api/core/v1 names). A
// field the example gains must be added here: strict decoding refuses
// any other, so a misspelt or misplaced field fails the test.
type kubeDoc struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   kubeMeta          `yaml:"metadata"`
	Data       map[string]string `yaml:"data"` // ConfigMap
	Spec       *podSpec          `yaml:"spec"` // Pod
}

type kubeMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type podSpec struct {
	DNSPolicy                    string      `yaml:"dnsPolicy"`
	DNSConfig                    *dnsConfig  `yaml:"dnsConfig"`
	AutomountServiceAccountToken *bool       `yaml:"automountServiceAccountToken"`
	InitContainers               []container `yaml:"initContainers"`
	Containers                   []container `yaml:"containers"`
	Volumes                      []volume    `yaml:"volumes"`
}

type dnsConfig struct {
	Nameservers []string `yaml:"nameservers"`
	Searches    []string `yaml:"searches"`
	Options     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"options"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	RestartPolicy   string   `yaml:"restartPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	SecurityContext *securityContext `yaml:"securityContext"`
	StartupProbe    *probe           `yaml:"startupProbe"`
	LivenessProbe   *probe           `yaml:"livenessProbe"`
	ReadinessProbe  *probe           `yaml:"readinessProbe"`
	VolumeMounts    []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type securityContext struct {
	RunAsUser                *int  `yaml:"runAsUser"`
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	Privileged               *bool `yaml:"privileged"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	Capabilities             *struct {
		Add  []string `yaml:"add"`
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
	SeccompProfile *struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a number or a port's name
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	TimeoutSeconds   int `yaml:"timeoutSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	Secret *struct {
		SecretName  string `yaml:"secretName"`
		DefaultMode *int   `yaml:"defaultMode"`
	} `yaml:"secret"`
	EmptyDir *struct {
		Medium    string `yaml:"medium"`
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
}

// The compose fields the example uses (the Compose Specification).
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct {
				Subnet string `yaml:"subnet"`
			} `yaml:"config"`
		} `yaml:"ipam"`
	} `yaml:"networks"`
}

type composeService struct {
	Image       string              `yaml:"image"`
	Command     []string            `yaml:"command"`
	CapAdd      []string            `yaml:"cap_add"`
	CapDrop     []string            `yaml:"cap_drop"`
	SecurityOpt []string            `yaml:"security_opt"`
	Devices     []string            `yaml:"devices"`
	DNS         []string            `yaml:"dns"`
	ReadOnly    bool                `yaml:"read_only"`
	Tmpfs       []string            `yaml:"tmpfs"`
	Volumes     []string            `yaml:"volumes"`
	Networks    map[string]struct{} `yaml:"networks"`
	NetworkMode string              `yaml:"network_mode"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

// agentConfig is what the checks read of the agent's config (the agent
// itself validates all of it).
type agentConfig struct {
	Name      string `json:"name"`
	WireGuard struct {
		ConfigFile string `json:"configFile"`
	} `json:"wireguard"`
	Metrics struct {
		Listen string `json:"listen"`
	} `json:"metrics"`
	Sidecar *struct {
		AllowedSubnets []string `json:"allowedSubnets"`
		ClusterDNS     *struct {
			Server  string   `json:"server"`
			Domains []string `json:"domains"`
		} `json:"clusterDNS"`
	} `json:"sidecar"`
}

// decodeStrict decodes every YAML document of file into a new T,
// refusing unknown fields.
func decodeStrict[T any](t *testing.T, file string) []T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var docs []T
	for {
		var d T
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, d)
	}
	return docs
}

// The shipped examples, decoded.
type kubeExample struct {
	configMap kubeDoc
	pod       kubeDoc
	agent     container // the sidecar: the init container named vpn
	app       container
	cfg       agentConfig
	cfgJSON   string
	cfgPath   string // --config's value
}

const (
	kubeFile    = "dist/kubernetes/pod.yaml"
	composeYAML = "dist/compose/compose.yaml"
	composeCfg  = "dist/compose/sidecar.json"
)

func loadKube(t *testing.T) kubeExample {
	t.Helper()
	var k kubeExample
	for _, d := range decodeStrict[kubeDoc](t, kubeFile) {
		if d.APIVersion != "v1" {
			t.Errorf("%s: %s %q has apiVersion %q, want v1", kubeFile, d.Kind, d.Metadata.Name, d.APIVersion)
		}
		switch d.Kind {
		case "ConfigMap":
			k.configMap = d
		case "Pod":
			k.pod = d
		default:
			t.Errorf("%s: unexpected kind %q", kubeFile, d.Kind)
		}
	}
	if k.pod.Spec == nil || k.configMap.Data == nil {
		t.Fatalf("%s: want a ConfigMap and a Pod", kubeFile)
	}
	if len(k.pod.Spec.InitContainers) != 1 || len(k.pod.Spec.Containers) != 1 {
		t.Fatalf("%s: want one init container (the agent) and one container (the app)", kubeFile)
	}
	k.agent, k.app = k.pod.Spec.InitContainers[0], k.pod.Spec.Containers[0]
	k.cfgPath = flagValue(t, k.agent.Args, "--config")
	var ok bool
	if k.cfgJSON, ok = k.configMap.Data[path.Base(k.cfgPath)]; !ok {
		t.Fatalf("%s: the ConfigMap has no key %q (the agent's --config %s)", kubeFile, path.Base(k.cfgPath), k.cfgPath)
	}
	k.cfg = parseConfig(t, kubeFile+" ConfigMap", []byte(k.cfgJSON))
	return k
}

func parseConfig(t *testing.T, where string, b []byte) agentConfig {
	t.Helper()
	var c agentConfig
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: the agent config is not JSON: %v", where, err)
	}
	if c.Sidecar == nil {
		t.Fatalf("%s: the agent config has no sidecar section", where)
	}
	return c
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("no %s in %q", flag, args)
	}
	return args[i+1]
}

// metricsPort is the port of the config's metrics.listen.
func metricsPort(t *testing.T, c agentConfig) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(c.Metrics.Listen)
	if err != nil {
		t.Fatalf("metrics.listen %q: %v", c.Metrics.Listen, err)
	}
	return int(ap.Port())
}

// validateStatic runs `vpn-agent validate --static` on the config. Until
// the agent knows sidecar mode (issue 23, the "sidecar" config field), it
// skips, saying so.
func validateStatic(t *testing.T, where string, cfg []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "sidecar.json")
	if err := os.WriteFile(f, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(agentBin, "validate", "--static", "--config", f).CombinedOutput()
	if err != nil && strings.Contains(string(out), "sidecar: unknown field") {
		t.Skipf("this vpn-agent has no sidecar mode yet (validate --static: %s): the config field `sidecar` (agent/config, issue 23) is missing", strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Errorf("%s: vpn-agent validate --static refuses the agent config: %v: %s", where, err, out)
	}
}

func TestKubernetesConfigValidates(t *testing.T) {
	k := loadKube(t)
	validateStatic(t, kubeFile, []byte(k.cfgJSON))
}

func TestComposeConfigValidates(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, composeCfg))
	if err != nil {
		t.Fatal(err)
	}
	validateStatic(t, composeCfg, b)
}

// The pod: the agent a native sidecar gating the app, with only the
// capabilities it needs, its probes on the config's metrics port, its
// config and wg-quick file mounted where the config says; the app
// resolving through the agent, without capabilities.
func TestKubernetesPod(t *testing.T) {
	k := loadKube(t)
	a, app, spec := k.agent, k.app, k.pod.Spec
	if a.RestartPolicy != "Always" {
		t.Errorf("the agent (init container %q) has restartPolicy %q: want Always (a native sidecar)", a.Name, a.RestartPolicy)
	}
	if app.RestartPolicy != "" {
		t.Errorf("the app has a restartPolicy of its own (%q)", app.RestartPolicy)
	}

	// Probes: startup and readiness /readyz, liveness /healthz, on the
	// port that metrics.listen serves.
	port := metricsPort(t, k.cfg)
	portNames := map[string]int{}
	for _, p := range a.Ports {
		portNames[p.Name] = p.ContainerPort
	}
	for _, p := range []struct {
		what string
		p    *probe
		path string
	}{{"startupProbe", a.StartupProbe, "/readyz"}, {"readinessProbe", a.ReadinessProbe, "/readyz"}, {"livenessProbe", a.LivenessProbe, "/healthz"}} {
		if p.p == nil || p.p.HTTPGet == nil {
			t.Errorf("the agent has no %s.httpGet", p.what)
			continue
		}
		if p.p.HTTPGet.Path != p.path {
			t.Errorf("the agent's %s asks %s, want %s", p.what, p.p.HTTPGet.Path, p.path)
		}
		got, err := strconv.Atoi(p.p.HTTPGet.Port)
		if err != nil {
			var ok bool
			if got, ok = portNames[p.p.HTTPGet.Port]; !ok {
				t.Errorf("the agent's %s names port %q, which the container does not declare", p.what, p.p.HTTPGet.Port)
			}
		}
		if got != port {
			t.Errorf("the agent's %s probes port %d; metrics.listen is %s", p.what, got, k.cfg.Metrics.Listen)
		}
	}

	// Capabilities: every one dropped, NET_ADMIN and NET_BIND_SERVICE
	// added; not privileged.
	sc := a.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the agent has no securityContext.capabilities")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("the agent drops %q, want [ALL]", sc.Capabilities.Drop)
	}
	if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []string{"NET_ADMIN", "NET_BIND_SERVICE"}) {
		t.Errorf("the agent adds %q, want exactly NET_ADMIN and NET_BIND_SERVICE", add)
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the agent must say privileged: false, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true")
	}
	asc := app.SecurityContext
	if asc == nil || asc.Capabilities == nil || !slices.Equal(asc.Capabilities.Drop, []string{"ALL"}) || len(asc.Capabilities.Add) > 0 {
		t.Error("the app must drop ALL capabilities and add none (with NET_ADMIN it could remove the kill switch)")
	}

	// Mounts: the config from the ConfigMap, the wg-quick file from a
	// Secret (read-only, mode 0400), /run and /var/run writable, the TUN
	// device.
	vols := map[string]volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mountOf := func(file string) (volume, bool) {
		for _, m := range a.VolumeMounts {
			if path.Dir(file) == m.MountPath {
				return vols[m.Name], m.ReadOnly
			}
		}
		t.Errorf("nothing is mounted at %s (for %s)", path.Dir(file), file)
		return volume{}, false
	}
	if v, ro := mountOf(k.cfgPath); v.ConfigMap == nil || v.ConfigMap.Name != k.configMap.Metadata.Name || !ro {
		t.Errorf("%s is not the ConfigMap %q mounted read-only", path.Dir(k.cfgPath), k.configMap.Metadata.Name)
	}
	if v, ro := mountOf(k.cfg.WireGuard.ConfigFile); v.Secret == nil || !ro {
		t.Errorf("wireguard.configFile %s is not from a Secret mounted read-only", k.cfg.WireGuard.ConfigFile)
	} else if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
		t.Errorf("the Secret's defaultMode is not 0400: the agent refuses a wg-quick file others can read")
	}
	for _, f := range []string{"/run/vpn-confinement", "/var/run/wireguard"} {
		if v, ro := mountOf(f); ro || v.EmptyDir == nil {
			t.Errorf("%s is not a writable emptyDir mount", path.Dir(f))
		}
	}
	if v, _ := mountOf("/dev/net/tun/x"); v.HostPath == nil || v.HostPath.Path != "/dev/net/tun" || v.HostPath.Type != "CharDevice" {
		t.Error("/dev/net/tun is not the host's TUN device (hostPath, type CharDevice)")
	}

	// DNS: every container of the pod asks the agent's forwarder.
	if spec.DNSPolicy != "None" || spec.DNSConfig == nil || !slices.Equal(spec.DNSConfig.Nameservers, []string{"127.0.0.1"}) {
		t.Error("the pod must have dnsPolicy: None and dnsConfig.nameservers [127.0.0.1]")
	}
	if cd := k.cfg.Sidecar.ClusterDNS; cd != nil {
		for _, d := range cd.Domains {
			if !slices.ContainsFunc(spec.DNSConfig.Searches, func(s string) bool { return s == d || strings.HasSuffix(s, "."+d) }) {
				t.Errorf("no search domain of the pod is at or under clusterDNS domain %q", d)
			}
		}
	}
}

// The compose example: the same agent and app, the same rules.
func TestCompose(t *testing.T) {
	files := decodeStrict[composeFile](t, composeYAML)
	if len(files) != 1 {
		t.Fatalf("%s: %d documents", composeYAML, len(files))
	}
	c := files[0]
	b, err := os.ReadFile(filepath.Join(root, composeCfg))
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, composeCfg, b)
	vpn, ok := c.Services["vpn"]
	app, ok2 := c.Services["app"]
	if !ok || !ok2 {
		t.Fatalf("%s: want services vpn and app", composeYAML)
	}
	if !slices.Equal(vpn.CapDrop, []string{"ALL"}) || !slices.Equal(slices.Sorted(slices.Values(vpn.CapAdd)), []string{"NET_ADMIN", "NET_BIND_SERVICE"}) {
		t.Errorf("vpn: cap_drop %q cap_add %q, want [ALL] and exactly NET_ADMIN, NET_BIND_SERVICE", vpn.CapDrop, vpn.CapAdd)
	}
	if !slices.Contains(vpn.Devices, "/dev/net/tun:/dev/net/tun") {
		t.Errorf("vpn: devices %q lack /dev/net/tun", vpn.Devices)
	}
	if !slices.Equal(vpn.DNS, []string{"127.0.0.1"}) {
		t.Errorf("vpn: dns %q, want [127.0.0.1] (the app, in its namespace, uses its resolv.conf)", vpn.DNS)
	}
	cfgPath := flagValue(t, vpn.Command, "--config")
	binds := map[string]string{} // container path -> host path
	for _, v := range vpn.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) != 3 || parts[2] != "ro" {
			t.Errorf("vpn: volume %q is not a read-only bind", v)
			continue
		}
		binds[parts[1]] = parts[0]
	}
	if src := binds[cfgPath]; filepath.Join("dist/compose", src) != composeCfg {
		t.Errorf("vpn: --config %s is bound from %q, want ./%s", cfgPath, src, filepath.Base(composeCfg))
	}
	if _, ok := binds[cfg.WireGuard.ConfigFile]; !ok {
		t.Errorf("vpn: nothing is bound at wireguard.configFile %s", cfg.WireGuard.ConfigFile)
	}
	if !vpn.ReadOnly || !slices.Contains(vpn.Tmpfs, "/run") || !slices.Contains(vpn.Tmpfs, "/var/run") {
		t.Error("vpn: want read_only with tmpfs /run and /var/run")
	}
	if hc := vpn.Healthcheck; hc == nil || !slices.Equal(hc.Test, []string{"CMD", "/usr/bin/vpn-agent", "status", cfg.Name}) {
		t.Errorf("vpn: the healthcheck must run `vpn-agent status %s` (the config's name)", cfg.Name)
	}
	if app.NetworkMode != "service:vpn" || app.DependsOn["vpn"].Condition != "service_healthy" {
		t.Error("app: want network_mode service:vpn and depends_on vpn: service_healthy")
	}
	if slices.Contains(app.CapAdd, "NET_ADMIN") || !slices.Contains(app.CapDrop, "NET_ADMIN") || !slices.Contains(app.CapDrop, "NET_RAW") {
		t.Error("app: must drop NET_ADMIN and NET_RAW and add neither")
	}
	var subnets []string
	for n := range vpn.Networks {
		for _, s := range c.Networks[n].IPAM.Config {
			subnets = append(subnets, s.Subnet)
		}
	}
	if !slices.Equal(subnets, cfg.Sidecar.AllowedSubnets) {
		t.Errorf("the vpn service's network subnets %q are not sidecar.allowedSubnets %q", subnets, cfg.Sidecar.AllowedSubnets)
	}
}

var (
	containerfile = "dist/image/Containerfile"
	nixImage      = "nix/image.nix"
	buildTagRE    = regexp.MustCompile(`podman build -t (\S+) dist/image`)
	cmdRE         = regexp.MustCompile(`(?m)^CMD (\[.*\])$`)
	nixNameRE     = regexp.MustCompile(`name = "([^"]+)";\s*tag = "([^"]+)";`)
	nixCmdRE      = regexp.MustCompile(`(?s)Cmd = \[(.*?)\];`)
	nixStringRE   = regexp.MustCompile(`"([^"]*)"`)
)

// One image, one config path: the manifests' image is what the
// Containerfile's documented build and the flake's image are called, and
// their default command is what the manifests run.
func TestImagesAgree(t *testing.T) {
	k := loadKube(t)
	c := decodeStrict[composeFile](t, composeYAML)[0]
	cf, err := os.ReadFile(filepath.Join(root, containerfile))
	if err != nil {
		t.Fatal(err)
	}
	nx, err := os.ReadFile(filepath.Join(root, nixImage))
	if err != nil {
		t.Fatal(err)
	}
	tag := buildTagRE.FindSubmatch(cf)
	nixName := nixNameRE.FindSubmatch(nx)
	cmd := cmdRE.FindSubmatch(cf)
	nixCmd := nixCmdRE.FindSubmatch(nx)
	if tag == nil || nixName == nil || cmd == nil || nixCmd == nil {
		t.Fatalf("cannot find the build tag and CMD in %s, or name, tag and Cmd in %s", containerfile, nixImage)
	}
	image := string(tag[1])
	for what, got := range map[string]string{
		nixImage:               string(nixName[1]) + ":" + string(nixName[2]),
		kubeFile + " (agent)":  k.agent.Image,
		composeYAML + " (vpn)": c.Services["vpn"].Image,
	} {
		if got != image {
			t.Errorf("%s: image %q; %s builds %q", what, got, containerfile, image)
		}
	}
	if k.app.Image != c.Services["app"].Image {
		t.Errorf("the app's image is %q in %s and %q in %s", k.app.Image, kubeFile, c.Services["app"].Image, composeYAML)
	}
	var cmdArgs []string
	if err := json.Unmarshal(cmd[1], &cmdArgs); err != nil {
		t.Fatalf("%s: CMD is not a JSON array: %v", containerfile, err)
	}
	var nixArgs []string
	for _, m := range nixStringRE.FindAllSubmatch(nixCmd[1], -1) {
		nixArgs = append(nixArgs, string(m[1]))
	}
	for what, got := range map[string][]string{
		nixImage:    nixArgs,
		kubeFile:    k.agent.Args,
		composeYAML: c.Services["vpn"].Command,
	} {
		if !slices.Equal(got, cmdArgs) {
			t.Errorf("%s runs %q; the Containerfile's CMD is %q", what, got, cmdArgs)
		}
	}
}

// kubectl (Debian's kubernetes-client) reads the manifest offline: `label
// --local` decodes every object without a cluster (create/apply
// --dry-run=client still ask the API server for its resource list).
func TestKubectlReads(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed (scripts/deps.sh installs kubernetes-client)")
	}
	home := t.TempDir()
	cmd := exec.Command("kubectl", "label", "--local", "--dry-run=client", "-o", "json", "-f", filepath.Join(root, kubeFile), "vpn-confinement.test/checked=yes")
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl label --local: %v: %s", err, stderr.String())
	}
	// One JSON object per document.
	var kinds []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubectl's output is not JSON: %v\n%s", err, out)
		}
		kinds = append(kinds, obj.Kind)
	}
	if !slices.Equal(kinds, []string{"ConfigMap", "Pod"}) {
		t.Errorf("kubectl read %q, want [ConfigMap Pod]", kinds)
	}
}
