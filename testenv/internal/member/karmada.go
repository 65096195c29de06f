package member

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/flotilla/flotilla/testenv/internal/karmada"
	"github.com/flotilla/flotilla/testenv/internal/pki"
)

// Karmada turns a member into a Karmada control plane: its etcd and kube-apiserver become
// karmada-apiserver (testenv's kube-apiserver flags already follow karmada-apiserver's
// deployment), and the supervisor also runs what hack/deploy-karmada.sh deploys beside it:
// kube-controller-manager with Karmada's controller list, karmada-aggregated-apiserver,
// karmada-webhook, karmada-controller-manager and karmada-scheduler. Each Karmada binary runs
// with its own defaults; only addresses, certificates and kubeconfigs are set, and Args
// appends a component's extra flags last (so they override testenv's).
type Karmada struct {
	Ports KarmadaPorts `json:"ports"`
	// WithoutControllers leaves karmada-controller-manager and karmada-scheduler to the
	// caller (their command lines are in KarmadaSummary.Commands): a benchmark can then
	// create objects while they are off, start them, kill and restart them.
	WithoutControllers bool `json:"withoutControllers,omitempty"`
	// Args are extra flags per component, keyed by component name (KarmadaComponents).
	Args map[string][]string `json:"args,omitempty"`
}

// KarmadaPorts are the loopback ports of the Karmada components.
type KarmadaPorts struct {
	KubeControllerManager    int `json:"kubeControllerManager"`
	AggregatedAPIServer      int `json:"aggregatedAPIServer"`
	Webhook                  int `json:"webhook"`
	WebhookMetrics           int `json:"webhookMetrics"`
	WebhookHealth            int `json:"webhookHealth"`
	ControllerManagerMetrics int `json:"controllerManagerMetrics"`
	ControllerManagerHealth  int `json:"controllerManagerHealth"`
	SchedulerMetrics         int `json:"schedulerMetrics"`
	SchedulerHealth          int `json:"schedulerHealth"`
}

// KarmadaPortCount is how many ports KarmadaPorts holds.
const KarmadaPortCount = 9

// Assign fills the ports from a list of free ones.
func (p *KarmadaPorts) Assign(free []int) {
	*p = KarmadaPorts{free[0], free[1], free[2], free[3], free[4], free[5], free[6], free[7], free[8]}
}

// List is every port, for the free-port check before a start.
func (p KarmadaPorts) List() []int {
	return []int{p.KubeControllerManager, p.AggregatedAPIServer, p.Webhook, p.WebhookMetrics, p.WebhookHealth,
		p.ControllerManagerMetrics, p.ControllerManagerHealth, p.SchedulerMetrics, p.SchedulerHealth}
}

// Component names of a Karmada control plane (also their log file names). The host's
// kube-controller-manager keeps the name ControllerManager.
const (
	KarmadaAggregatedAPIServer = "karmada-aggregated-apiserver"
	KarmadaWebhook             = "karmada-webhook"
	KarmadaControllerManager   = "karmada-controller-manager"
	KarmadaScheduler           = "karmada-scheduler"
)

// KarmadaComponents are the processes of a Karmada control plane, in start order.
var KarmadaComponents = []string{Etcd, APIServer, ControllerManager, KarmadaAggregatedAPIServer,
	KarmadaWebhook, KarmadaControllerManager, KarmadaScheduler}

// KarmadaControllers is the kube-controller-manager --controllers of Karmada's deployment
// (artifacts/deploy/kube-controller-manager.yaml): no workload controllers, so templates
// never run on the control plane.
var KarmadaControllers = []string{"namespace", "garbagecollector", "serviceaccount-token", "ttl-after-finished",
	"bootstrapsigner", "tokencleaner", "csrcleaner", "csrsigning", "clusterrole-aggregation"}

// Paths of the Karmada certificates (under pki/).
func (c *Config) karmadaWebhookCertDir() string { return filepath.Join(c.PKIDir(), "karmada-webhook") }

func (c *Config) writeKarmadaPKI(ca *pki.Authority) error {
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	agg, err := ca.Issue(pki.Leaf{
		CommonName: karmada.AggregatedService,
		// The aggregator verifies <service>.<namespace>.svc whatever address it dials.
		DNSNames: []string{"localhost", karmada.AggregatedService + "." + karmada.SystemNamespace + ".svc",
			karmada.AggregatedService + "." + karmada.SystemNamespace + ".svc.cluster.local"},
		IPs: loopback, Server: true,
	})
	if err != nil {
		return err
	}
	if err := pki.WriteKeyPair(c.PKIDir(), KarmadaAggregatedAPIServer, agg); err != nil {
		return err
	}
	wh, err := ca.Issue(pki.Leaf{
		CommonName: "karmada-webhook",
		DNSNames:   []string{"localhost", "karmada-webhook." + karmada.SystemNamespace + ".svc"},
		IPs:        loopback, Server: true,
	})
	if err != nil {
		return err
	}
	// karmada-webhook reads --cert-dir/tls.crt and tls.key.
	if err := os.MkdirAll(c.karmadaWebhookCertDir(), 0o755); err != nil {
		return err
	}
	return pki.WriteKeyPair(c.karmadaWebhookCertDir(), "tls", wh)
}

func (c *Config) karmadaArgs(component string, args []string) []string {
	return append(args, c.Karmada.Args[component]...)
}

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// KarmadaKubeControllerManagerArgs is kube-controller-manager as Karmada deploys it beside
// karmada-apiserver (its flags, minus the node-IPAM ones no listed controller uses).
func (c *Config) KarmadaKubeControllerManagerArgs() []string {
	kc := c.kubeconfig("controller-manager")
	return c.karmadaArgs(ControllerManager, []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--client-ca-file=" + c.pki("ca.crt"),
		"--cluster-name=karmada",
		"--cluster-signing-cert-file=" + c.pki("ca.crt"),
		"--cluster-signing-key-file=" + c.pki("ca.key"),
		"--controllers=" + strings.Join(KarmadaControllers, ","),
		"--leader-elect=true",
		"--root-ca-file=" + c.pki("ca.crt"),
		"--service-account-private-key-file=" + c.pki("sa.key"),
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--use-service-account-credentials=true",
		"--secure-port=" + strconv.Itoa(c.Karmada.Ports.KubeControllerManager),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + c.pki("components.crt"),
		"--tls-private-key-file=" + c.pki("components.key"),
	})
}

// KarmadaAggregatedAPIServerArgs follows artifacts/deploy/karmada-aggregated-apiserver.yaml:
// Cluster objects live in karmada-apiserver's etcd (plain HTTP on loopback here).
func (c *Config) KarmadaAggregatedAPIServerArgs() []string {
	kc := c.AdminKubeconfig()
	return c.karmadaArgs(KarmadaAggregatedAPIServer, []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--etcd-servers=" + c.EtcdURL(),
		"--tls-cert-file=" + c.pki(KarmadaAggregatedAPIServer+".crt"),
		"--tls-private-key-file=" + c.pki(KarmadaAggregatedAPIServer+".key"),
		"--tls-min-version=VersionTLS13",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Karmada.Ports.AggregatedAPIServer),
	})
}

// KarmadaWebhookArgs follows artifacts/deploy/karmada-webhook.yaml, with the binary's
// defaults for everything but addresses and certificates.
func (c *Config) KarmadaWebhookArgs() []string {
	p := c.Karmada.Ports
	return c.karmadaArgs(KarmadaWebhook, []string{
		"--kubeconfig=" + c.AdminKubeconfig(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.Webhook),
		"--cert-dir=" + c.karmadaWebhookCertDir(),
		"--metrics-bind-address=" + loopback(p.WebhookMetrics),
		"--health-probe-bind-address=" + loopback(p.WebhookHealth),
	})
}

// KarmadaControllerManagerArgs: the binary's defaults (all default controllers, default
// feature gates, QPS 40/burst 60 to karmada-apiserver and to each member, 5 workers per
// controller) plus addresses. Karmada's dev deployment adds AllAlpha/AllBeta feature gates
// and --v=4; pass those with Args if wanted.
func (c *Config) KarmadaControllerManagerArgs() []string {
	p := c.Karmada.Ports
	return c.karmadaArgs(KarmadaControllerManager, []string{
		"--kubeconfig=" + c.AdminKubeconfig(),
		"--cluster-status-update-frequency=10s",
		"--metrics-bind-address=" + loopback(p.ControllerManagerMetrics),
		"--health-probe-bind-address=" + loopback(p.ControllerManagerHealth),
	})
}

// KarmadaSchedulerArgs: the binary's defaults (no scheduler estimator) plus addresses.
func (c *Config) KarmadaSchedulerArgs() []string {
	p := c.Karmada.Ports
	return c.karmadaArgs(KarmadaScheduler, []string{
		"--kubeconfig=" + c.AdminKubeconfig(),
		"--metrics-bind-address=" + loopback(p.SchedulerMetrics),
		"--health-probe-bind-address=" + loopback(p.SchedulerHealth),
	})
}

// render is how this control plane fills Karmada's manifests.
func (c *Config) render() (karmada.Render, error) {
	ca, err := os.ReadFile(c.CAFile())
	if err != nil {
		return karmada.Render{}, err
	}
	return karmada.Render{Dir: c.Binaries.KarmadaCRDs, CABundle: ca,
		WebhookPort: c.Karmada.Ports.Webhook, AggregatedAPIServerPort: c.Karmada.Ports.AggregatedAPIServer}, nil
}

// startKarmada runs after karmada-apiserver is ready, in hack/deploy-karmada.sh's order:
// namespaces and CRDs; kube-controller-manager, the aggregated API server and the webhook;
// their registration (APIService Available, webhook answering a dry-run create); then
// karmada-controller-manager and karmada-scheduler, each gated on its health endpoint.
func (s *supervisor) startKarmada(ctx context.Context) error {
	c := s.cfg
	r, err := c.render()
	if err != nil {
		return err
	}
	kc, err := karmada.NewClient(c.AdminKubeconfig())
	if err != nil {
		return err
	}
	crds, err := r.CRDs()
	if err != nil {
		return err
	}
	webhooks, apiService, err := r.Registration()
	if err != nil {
		return err
	}
	if err := s.step(ctx, "karmada-crds", func() error {
		if err := s.waitFor(ctx, APIServer, func() error { return kc.Apply(ctx, r.Namespaces()...) }); err != nil {
			return err
		}
		if err := kc.Apply(ctx, crds...); err != nil {
			return err
		}
		return s.waitFor(ctx, APIServer, func() error { return kc.CRDsEstablished(ctx, crds) })
	}); err != nil {
		return err
	}
	compHTTP, err := s.componentHTTPClient()
	if err != nil {
		return err
	}
	p := c.Karmada.Ports
	if err := s.step(ctx, "karmada-host-components", func() error {
		for _, comp := range []struct {
			name, bin string
			args      []string
		}{
			{ControllerManager, c.Binaries.ControllerManager, c.KarmadaKubeControllerManagerArgs()},
			{KarmadaAggregatedAPIServer, c.Binaries.KarmadaAggregatedAPIServer, c.KarmadaAggregatedAPIServerArgs()},
			{KarmadaWebhook, c.Binaries.KarmadaWebhook, c.KarmadaWebhookArgs()},
		} {
			if err := s.spawn(comp.name, comp.bin, comp.args); err != nil {
				return err
			}
		}
		if err := s.waitFor(ctx, ControllerManager, func() error {
			return probe(ctx, compHTTP, "https://"+loopback(p.KubeControllerManager)+"/healthz", "ok")
		}); err != nil {
			return err
		}
		// karmada-webhook registers no health checks (its probe server answers 404): wait
		// until its TLS port answers HTTP at all, then for a request through the webhook.
		if err := s.waitFor(ctx, KarmadaWebhook, func() error {
			return answers(ctx, compHTTP, "https://"+loopback(p.Webhook)+"/")
		}); err != nil {
			return err
		}
		if err := kc.Apply(ctx, append(apiService, webhooks...)...); err != nil {
			return err
		}
		if err := s.waitFor(ctx, KarmadaAggregatedAPIServer, func() error {
			return kc.APIServiceAvailable(ctx, karmada.ClusterAPIService)
		}); err != nil {
			return err
		}
		return s.waitFor(ctx, KarmadaWebhook, func() error { return kc.WebhookAnswers(ctx) })
	}); err != nil {
		return err
	}
	if c.Karmada.WithoutControllers {
		return nil
	}
	return s.step(ctx, "karmada-controllers", func() error {
		if err := s.spawn(KarmadaControllerManager, c.Binaries.KarmadaControllerManager, c.KarmadaControllerManagerArgs()); err != nil {
			return err
		}
		if err := s.spawn(KarmadaScheduler, c.Binaries.KarmadaScheduler, c.KarmadaSchedulerArgs()); err != nil {
			return err
		}
		if err := s.waitFor(ctx, KarmadaControllerManager, func() error {
			return probe(ctx, compHTTP, "http://"+loopback(p.ControllerManagerHealth)+"/healthz", "ok")
		}); err != nil {
			return err
		}
		return s.waitFor(ctx, KarmadaScheduler, func() error {
			return probe(ctx, compHTTP, "http://"+loopback(p.SchedulerHealth)+"/healthz", "ok")
		})
	})
}

// KarmadaSummary is DIR/karmada.json, written by `testenv karmada up` for benchmark drivers.
type KarmadaSummary struct {
	Version    string            `json:"karmadaVersion"`
	Kubernetes string            `json:"kubernetesVersion"`
	Kubeconfig string            `json:"kubeconfig"`
	Server     string            `json:"server"`
	LogDir     string            `json:"logDir"`
	Supervisor int               `json:"supervisorPid"`
	PIDs       map[string]int    `json:"pids"`
	Ports      KarmadaPorts      `json:"ports"`
	EtcdURL    string            `json:"etcd"`
	Metrics    map[string]string `json:"metrics"`
	Health     map[string]string `json:"health"`
	// Commands are the full command lines (binary first) of every process; with
	// WithoutControllers the caller runs karmada-controller-manager and karmada-scheduler
	// from these.
	Commands           map[string][]string `json:"commands"`
	WithoutControllers bool                `json:"withoutControllers,omitempty"`
}

// Summary describes a running Karmada control plane.
func (c *Config) KarmadaSummary() (KarmadaSummary, error) {
	if c.Karmada == nil {
		return KarmadaSummary{}, fmt.Errorf("%s is not a Karmada control plane", c.Name)
	}
	st, err := ReadState(c)
	if err != nil {
		return KarmadaSummary{}, err
	}
	r, _ := c.render()
	p := c.Karmada.Ports
	sum := KarmadaSummary{
		Version: r.Version(), Kubernetes: KubernetesVersion, Kubeconfig: c.AdminKubeconfig(),
		Server: c.Server(), LogDir: c.LogDir(), Supervisor: st.Supervisor.PID, PIDs: map[string]int{},
		Ports: p, EtcdURL: c.EtcdURL(),
		Metrics: map[string]string{
			KarmadaControllerManager: "http://" + loopback(p.ControllerManagerMetrics) + "/metrics",
			KarmadaScheduler:         "http://" + loopback(p.SchedulerMetrics) + "/metrics",
			KarmadaWebhook:           "http://" + loopback(p.WebhookMetrics) + "/metrics",
		},
		Health: map[string]string{
			KarmadaControllerManager: "http://" + loopback(p.ControllerManagerHealth) + "/healthz",
			KarmadaScheduler:         "http://" + loopback(p.SchedulerHealth) + "/healthz",
		},
		Commands: map[string][]string{
			Etcd:                       append([]string{c.Binaries.Etcd}, c.EtcdArgs()...),
			APIServer:                  append([]string{c.Binaries.APIServer}, c.APIServerArgs()...),
			ControllerManager:          append([]string{c.Binaries.ControllerManager}, c.KarmadaKubeControllerManagerArgs()...),
			KarmadaAggregatedAPIServer: append([]string{c.Binaries.KarmadaAggregatedAPIServer}, c.KarmadaAggregatedAPIServerArgs()...),
			KarmadaWebhook:             append([]string{c.Binaries.KarmadaWebhook}, c.KarmadaWebhookArgs()...),
			KarmadaControllerManager:   append([]string{c.Binaries.KarmadaControllerManager}, c.KarmadaControllerManagerArgs()...),
			KarmadaScheduler:           append([]string{c.Binaries.KarmadaScheduler}, c.KarmadaSchedulerArgs()...),
		},
		WithoutControllers: c.Karmada.WithoutControllers,
	}
	for name, ref := range st.Components {
		if ref.Alive() {
			sum.PIDs[name] = ref.PID
		}
	}
	return sum, nil
}

// answers reports whether url answers HTTP with any status (TLS verified).
func answers(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
