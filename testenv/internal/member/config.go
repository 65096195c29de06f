// Package member describes one member cluster (its config file, certificates, kubeconfigs and
// the command lines of its processes) and supervises its processes.
//
// Start reading at Config (what `testenv up` writes to DIR/<member>/member.json), then
// Prepare (certificates and kubeconfigs, created once and reused by `testenv start`), then
// supervisor.go (the one process per member that owns etcd, kube-apiserver and the
// optional workload components, and tears all of them down if its watchdogs fire). A member
// can instead be a Karmada control plane (karmada.go): its kube-apiserver is then
// karmada-apiserver and the supervisor also runs Karmada's components.
package member

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flotilla/flotilla/testenv/internal/proc"
)

// KubernetesVersion is the version the binaries are built from (see build.sh).
const KubernetesVersion = "v1.37.2"

// DefaultControllers are the kube-controller-manager controllers --with-workloads runs.
// Node lifecycle stays off: fake nodes are kept Ready by the fake kubelet instead.
var DefaultControllers = []string{
	"deployment", "replicaset", "statefulset", "daemonset", "job", "cronjob",
	"endpointslice", "namespace", "garbagecollector", "serviceaccount",
	"serviceaccount-token", "podgc", "clusterrole-aggregation",
}

// Config is everything needed to (re)start one member; it is written once by `up` and read
// by the supervisor, `start`, `stop` and `status`.
type Config struct {
	Name          string   `json:"name"`
	EnvDir        string   `json:"envDir"` // absolute DIR given to `testenv up --out`
	Binaries      Binaries `json:"binaries"`
	Ports         Ports    `json:"ports"`
	ServiceCIDR   string   `json:"serviceCIDR"`
	WithWorkloads bool     `json:"withWorkloads"`
	Controllers   []string `json:"controllers,omitempty"`
	Nodes         Nodes    `json:"nodes"`
	// APIServerFlags are appended after testenv's own flags, so they override them.
	APIServerFlags []string `json:"apiServerFlags,omitempty"`
	ReadyTimeout   Duration `json:"readyTimeout"`
	// Parent, when set, is a process whose death tears the member down.
	Parent *proc.Ref `json:"parent,omitempty"`
	// LeaseTimeout, when non-zero, tears the member down if DIR/lease is not touched for
	// that long.
	LeaseTimeout Duration `json:"leaseTimeout,omitempty"`
	// Karmada, when set, makes this a Karmada control plane (karmada.go); it excludes
	// WithWorkloads.
	Karmada *Karmada `json:"karmada,omitempty"`
}

// Binaries are absolute paths of the executables a member runs.
type Binaries struct {
	Etcd              string `json:"etcd"`
	APIServer         string `json:"kubeAPIServer"`
	ControllerManager string `json:"kubeControllerManager"`
	Scheduler         string `json:"kubeScheduler"`
	Testenv           string `json:"testenv"`
	// Karmada's binaries and the karmada-crds directory (a Karmada control plane only).
	KarmadaAggregatedAPIServer string `json:"karmadaAggregatedAPIServer,omitempty"`
	KarmadaControllerManager   string `json:"karmadaControllerManager,omitempty"`
	KarmadaScheduler           string `json:"karmadaScheduler,omitempty"`
	KarmadaWebhook             string `json:"karmadaWebhook,omitempty"`
	KarmadaCRDs                string `json:"karmadaCRDs,omitempty"`
}

// Ports are the loopback TCP ports of one member; they stay fixed across stop/start.
type Ports struct {
	APIServer         int `json:"apiserver"`
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	ControllerManager int `json:"controllerManager,omitempty"`
	Scheduler         int `json:"scheduler,omitempty"`
}

// Nodes configures the fake nodes of a member with workloads.
type Nodes struct {
	Count   int      `json:"count"`
	CPU     string   `json:"cpu"`
	Memory  string   `json:"memory"`
	Pods    string   `json:"pods"`
	Region  string   `json:"region"`
	Zones   []string `json:"zones"`
	PodCIDR string   `json:"podCIDR"`
}

// NodeNames are the names of the member's fake nodes.
func (c *Config) NodeNames() []string {
	if !c.WithWorkloads {
		return nil
	}
	names := make([]string, c.Nodes.Count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-node-%d", c.Name, i+1)
	}
	return names
}

// Duration is a time.Duration that reads and writes as "90s" in JSON.
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	d.Duration = v
	return err
}

// Paths of the member's files, all under DIR/<member>/ except the admin kubeconfig.
func (c *Config) Dir() string             { return filepath.Join(c.EnvDir, c.Name) }
func (c *Config) ConfigFile() string      { return filepath.Join(c.Dir(), "member.json") }
func (c *Config) StateFile() string       { return filepath.Join(c.Dir(), "state.json") }
func (c *Config) ReleaseFile() string     { return filepath.Join(c.Dir(), "release") }
func (c *Config) PKIDir() string          { return filepath.Join(c.Dir(), "pki") }
func (c *Config) LogDir() string          { return filepath.Join(c.Dir(), "logs") }
func (c *Config) EtcdDataDir() string     { return filepath.Join(c.Dir(), "etcd") }
func (c *Config) KubeconfigDir() string   { return filepath.Join(c.Dir(), "kubeconfigs") }
func (c *Config) AdminKubeconfig() string { return filepath.Join(c.EnvDir, c.Name+".kubeconfig") }
func (c *Config) CAFile() string          { return filepath.Join(c.PKIDir(), "ca.crt") }
func (c *Config) LeaseFile() string       { return filepath.Join(c.EnvDir, "lease") }
func (c *Config) Server() string          { return "https://127.0.0.1:" + strconv.Itoa(c.Ports.APIServer) }
func (c *Config) EtcdURL() string         { return "http://127.0.0.1:" + strconv.Itoa(c.Ports.EtcdClient) }
func (c *Config) pki(name string) string  { return filepath.Join(c.PKIDir(), name) }
func (c *Config) kubeconfig(component string) string {
	return filepath.Join(c.KubeconfigDir(), component+".kubeconfig")
}

// Tags are the environment entries that mark every process of this member.
func (c *Config) Tags() []string {
	return []string{proc.TagDir + "=" + c.EnvDir, proc.TagMember + "=" + c.Name}
}

// Save writes member.json.
func (c *Config) Save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(c.ConfigFile(), append(b, '\n'))
}

// Load reads DIR/<name>/member.json.
func Load(envDir, name string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(envDir, name, "member.json"))
	if err != nil {
		return nil, fmt.Errorf("member %q: %w", name, err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("member %q: parse member.json: %w", name, err)
	}
	return &c, nil
}

// EtcdArgs is the etcd command line.
func (c *Config) EtcdArgs() []string {
	peer := "http://127.0.0.1:" + strconv.Itoa(c.Ports.EtcdPeer)
	args := []string{
		"--name=" + c.Name,
		"--data-dir=" + c.EtcdDataDir(),
		"--listen-client-urls=" + c.EtcdURL(),
		"--advertise-client-urls=" + c.EtcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.Name + "=" + peer,
		"--initial-cluster-state=new",
		// Throwaway test data: skip fsync. A killed etcd process loses nothing (the page
		// cache survives); only a machine crash would.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=" + strconv.Itoa(4<<30),
		"--log-level=warn",
	}
	if c.Karmada != nil {
		args = append(args, c.Karmada.Args[Etcd]...)
	}
	return args
}

// APIServerArgs is the kube-apiserver command line. Authorization modes and admission
// plugins follow karmada-apiserver's deployment (artifacts/deploy/karmada-apiserver.yaml):
// Node,RBAC; bootstrap tokens on; StorageObjectInUseProtection and ServiceAccount admission
// off; front-proxy (requestheader) flags for aggregated APIs.
func (c *Config) APIServerArgs() []string {
	args := []string{
		"--etcd-servers=" + c.EtcdURL(),
		"--etcd-prefix=/registry",
		"--secure-port=" + strconv.Itoa(c.Ports.APIServer),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--cert-dir=" + c.PKIDir(),
		"--tls-cert-file=" + c.pki("apiserver.crt"),
		"--tls-private-key-file=" + c.pki("apiserver.key"),
		"--client-ca-file=" + c.pki("ca.crt"),
		"--kubelet-client-certificate=" + c.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + c.pki("apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki("sa.pub"),
		"--service-account-signing-key-file=" + c.pki("sa.key"),
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-bootstrap-token-auth=true",
		"--disable-admission-plugins=StorageObjectInUseProtection,ServiceAccount",
		"--allow-privileged=true",
		// The lease endpoint reconciler would publish 127.0.0.1 as the endpoint of the
		// `kubernetes` Service, which Endpoints validation rejects (loopback).
		"--endpoint-reconciler-type=none",
		"--requestheader-client-ca-file=" + c.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + c.pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + c.pki("front-proxy-client.key"),
		"--shutdown-delay-duration=0s",
	}
	return append(args, c.APIServerFlags...)
}

// ControllerManagerArgs is the kube-controller-manager command line.
func (c *Config) ControllerManagerArgs() []string {
	kc := c.kubeconfig("controller-manager")
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--controllers=" + strings.Join(c.Controllers, ","),
		// As kubeadm does: each controller acts as its own service account, with the
		// bootstrap system:controller:* roles.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki("sa.key"),
		"--root-ca-file=" + c.pki("ca.crt"),
		"--cluster-name=" + c.Name,
		"--secure-port=" + strconv.Itoa(c.Ports.ControllerManager),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + c.pki("components.crt"),
		"--tls-private-key-file=" + c.pki("components.key"),
		"--kube-api-qps=100",
		"--kube-api-burst=200",
	}
}

// SchedulerArgs is the kube-scheduler command line.
func (c *Config) SchedulerArgs() []string {
	kc := c.kubeconfig("scheduler")
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--secure-port=" + strconv.Itoa(c.Ports.Scheduler),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + c.pki("components.crt"),
		"--tls-private-key-file=" + c.pki("components.key"),
	}
}

// KubeletArgs is the command line of the fake kubelet (`testenv kubelet`).
func (c *Config) KubeletArgs() []string {
	return []string{
		"kubelet",
		"--kubeconfig=" + c.kubeconfig("kubelet"),
		"--nodes=" + strings.Join(c.NodeNames(), ","),
		"--cpu=" + c.Nodes.CPU,
		"--memory=" + c.Nodes.Memory,
		"--pods=" + c.Nodes.Pods,
		"--region=" + c.Nodes.Region,
		"--zones=" + strings.Join(c.Nodes.Zones, ","),
		"--pod-cidr=" + c.Nodes.PodCIDR,
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
