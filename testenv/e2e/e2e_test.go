// Package e2e runs the testenv binary end to end: real etcd and kube-apiserver members,
// workloads through kube-controller-manager, kube-scheduler and the fake kubelet, the
// stop/kill/start lifecycle, and the no-orphans guarantees.
//
// TestMain builds everything with ../build.sh first (a no-op when up to date); set
// TESTENV_SKIP_BUILD=1 to use the binaries already in $TESTENV_BIN_DIR.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla/flotilla/testenv/internal/env"
	"github.com/flotilla/flotilla/testenv/internal/member"
	"github.com/flotilla/flotilla/testenv/internal/proc"
)

var testenvBin string

func TestMain(m *testing.M) {
	binDir := os.Getenv("TESTENV_BIN_DIR")
	if binDir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		binDir = filepath.Join(cache, "flotilla", "testenv", "bin")
	}
	if os.Getenv("TESTENV_SKIP_BUILD") == "" {
		cmd := exec.Command("../build.sh")
		cmd.Env = append(os.Environ(), "TESTENV_BIN_DIR="+binDir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: ../build.sh failed: %v\n", err)
			os.Exit(1)
		}
	}
	testenvBin = filepath.Join(binDir, "testenv")
	os.Exit(m.Run())
}

// run runs testenv with args and fails the test with its output if it fails.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenvBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newDir returns a fresh environment directory that is torn down (and checked for
// leftovers) at the end of the test. Logs are kept when the test fails.
func newDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "testenv-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, err := exec.Command(testenvBin, "down", "--out", dir).CombinedOutput()
		if err != nil {
			t.Errorf("testenv down: %v\n%s", err, out)
		}
		if left := proc.Tagged(proc.TagDir + "=" + dir); len(left) > 0 {
			t.Errorf("processes left after down: %v", left)
		}
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	return dir
}

func readReady(t *testing.T, dir string) env.Ready {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, env.ReadyFile))
	if err != nil {
		t.Fatal(err)
	}
	var r env.Ready
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func clientFor(t *testing.T, m env.MemberInfo) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestMembers brings up two members with workloads and exercises them.
func TestMembers(t *testing.T) {
	dir := newDir(t)
	t0 := time.Now()
	run(t, "up", "--members", "2", "--with-workloads", "--nodes", "2", "--out", dir,
		"--region", "member1=eu-west", "--zones", "member1=eu-west-a,eu-west-b",
		"--node-cpu", "member2=4", "--parent-pid", strconv.Itoa(os.Getpid()))
	t.Logf("2 members with workloads up in %.1fs", time.Since(t0).Seconds())
	ready := readReady(t, dir)
	if len(ready.Members) != 2 || ready.Members[0].Name != "member1" || ready.Members[1].Name != "member2" {
		t.Fatalf("ready.json members: %+v", ready.Members)
	}
	ctx := context.Background()

	t.Run("readyz and version through the kubeconfig", func(t *testing.T) {
		for _, m := range ready.Members {
			if !m.Running || m.Phase != member.PhaseReady {
				t.Errorf("%s: running=%v phase=%q", m.Name, m.Running, m.Phase)
			}
			cs := clientFor(t, m)
			body, err := cs.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil || string(body) != "ok" {
				t.Errorf("%s /readyz: %q %v", m.Name, body, err)
			}
			v, err := cs.Discovery().ServerVersion()
			if err != nil || v.GitVersion != member.KubernetesVersion {
				t.Errorf("%s version: %+v %v", m.Name, v, err)
			}
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Errorf("%s: default namespace: %v", m.Name, err)
			}
		}
	})

	t.Run("fake nodes carry capacity and topology", func(t *testing.T) {
		nodes, err := clientFor(t, ready.Members[0]).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 2 {
			t.Fatalf("member1 nodes: %v %v", len(nodes.Items), err)
		}
		zones := map[string]bool{}
		for _, n := range nodes.Items {
			if n.Labels[corev1.LabelTopologyRegion] != "eu-west" {
				t.Errorf("%s region label %q", n.Name, n.Labels[corev1.LabelTopologyRegion])
			}
			zones[n.Labels[corev1.LabelTopologyZone]] = true
			if n.Status.Allocatable.Cpu().String() != "8" {
				t.Errorf("%s cpu %s", n.Name, n.Status.Allocatable.Cpu())
			}
		}
		if !zones["eu-west-a"] || !zones["eu-west-b"] {
			t.Errorf("zones %v", zones)
		}
		n2, err := clientFor(t, ready.Members[1]).CoreV1().Nodes().Get(ctx, "member2-node-1", metav1.GetOptions{})
		if err != nil || n2.Status.Allocatable.Cpu().String() != "4" || n2.Labels[corev1.LabelTopologyRegion] != "region-member2" {
			t.Errorf("member2-node-1: %v %v", n2, err)
		}
	})

	t.Run("a 3-replica Deployment becomes ready and backs a Service", func(t *testing.T) {
		cs := clientFor(t, ready.Members[0])
		labels := map[string]string{"app": "web"}
		_, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m")}}}}},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, "deployment web has 3 ready replicas", func() error {
			d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas != 3 || d.Status.AvailableReplicas != 3 {
				return fmt.Errorf("ready %d available %d", d.Status.ReadyReplicas, d.Status.AvailableReplicas)
			}
			return nil
		})
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !strings.HasPrefix(p.Spec.NodeName, "member1-node-") {
				t.Errorf("pod %s: phase %s ip %q node %q", p.Name, p.Status.Phase, p.Status.PodIP, p.Spec.NodeName)
			}
		}
		// A Service gets an EndpointSlice with the three ready pod IPs (endpointslice controller).
		if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "EndpointSlice of service web lists 3 ready endpoints", func() error {
			slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{
				LabelSelector: discoveryv1.LabelServiceName + "=web"})
			if err != nil {
				return err
			}
			ready := 0
			for _, sl := range slices.Items {
				for _, ep := range sl.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
						ready++
					}
				}
			}
			if ready != 3 {
				return fmt.Errorf("%d ready endpoints", ready)
			}
			return nil
		})
		// Scaling down deletes pods gracefully; the fake kubelet finalises the deletion.
		if _, err := cs.AppsV1().Deployments("default").Patch(ctx, "web", "application/merge-patch+json",
			[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "scaled-down pods are gone", func() error {
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return err
			}
			if len(pods.Items) != 1 {
				return fmt.Errorf("%d pods", len(pods.Items))
			}
			return nil
		})
	})

	t.Run("pods/log and pods/exec reach the fake kubelet", func(t *testing.T) {
		testKubeletAPI(t, ready.Members[0])
	})

	t.Run("stop refuses connections; start brings the data back", func(t *testing.T) {
		m := ready.Members[1]
		cs := clientFor(t, m)
		portsBefore, err := kubeletPorts(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"stop", "kill"} {
			run(t, op, "--member", m.Name, "--out", dir)
			if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(m.Server, "https://"), time.Second); err == nil {
				conn.Close()
				t.Fatalf("after %s, %s still accepts connections", op, m.Server)
			}
			if left := proc.Tagged(proc.TagDir+"="+dir, proc.TagMember+"="+m.Name); len(left) > 0 {
				t.Fatalf("after %s, processes of %s remain: %v", op, m.Name, left)
			}
			if r := readReady(t, dir); r.Members[1].Running || !r.Members[0].Running {
				t.Fatalf("after %s, ready.json says %+v", op, r.Members)
			}
			t0 := time.Now()
			run(t, "start", "--member", m.Name, "--out", dir)
			t.Logf("%s then start: back in %.1fs", op, time.Since(t0).Seconds())
			got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("after %s+start: %v", op, err)
			}
			if got.UID != cm.UID || got.Data["k"] != "v" {
				t.Fatalf("after %s+start the ConfigMap differs: %+v", op, got)
			}
			if r := readReady(t, dir); !r.Members[1].Running || r.Members[1].Server != m.Server {
				t.Fatalf("after start, ready.json says %+v", r.Members[1])
			}
			// The restarted fake kubelet listens on new ports and says so in the nodes' status.
			eventually(t, 30*time.Second, "nodes report the new kubelet ports", func() error {
				ports, err := kubeletPorts(ctx, cs)
				if err != nil {
					return err
				}
				// (The kernel could hand one node its old port again, not all of them.)
				same := 0
				for n, p := range ports {
					if p == portsBefore[n] {
						same++
					}
				}
				if same == len(ports) {
					return fmt.Errorf("nodes still report the ports %v", ports)
				}
				portsBefore = ports
				return nil
			})
		}
		pod := runningPod(t, cs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "after-restart", Namespace: "default"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		})
		if r := podExec(t, restConfigFor(t, m), cs, pod, "spdy", "", "hostname"); r.err != nil || r.stdout != "after-restart\n" {
			t.Errorf("exec after the restarts: %+v", r)
		}
	})

	t.Run("status", func(t *testing.T) {
		out := run(t, "status", "--out", dir, "--json")
		var rows []env.StatusRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, r := range rows {
			if r.Readyz != "ok" || r.RSS == 0 {
				t.Errorf("%s: readyz %q rss %d", r.Name, r.Readyz, r.RSS)
			}
		}
	})
}

// TestNoOrphans kills the processes that own a member in every way they can die and checks
// that nothing of the member survives.
func TestNoOrphans(t *testing.T) {
	t.Run("supervisor or parent killed", func(t *testing.T) {
		dir := newDir(t)
		parent := exec.Command("sleep", "600")
		if err := parent.Start(); err != nil {
			t.Fatal(err)
		}
		defer parent.Process.Kill()
		run(t, "up", "--names", "a,b", "--out", dir, "--parent-pid", strconv.Itoa(parent.Process.Pid))
		ready := readReady(t, dir)
		if len(proc.Tagged(proc.TagDir+"="+dir)) != 6 {
			t.Fatalf("want 6 processes (2 x supervisor, etcd, apiserver), got %v", proc.Tagged(proc.TagDir+"="+dir))
		}

		// SIGKILL only the supervisor of a: its children get SIGKILL from the kernel
		// (PR_SET_PDEATHSIG), nobody has to clean up.
		syscall.Kill(ready.Members[0].PIDs["supervisor"], syscall.SIGKILL)
		eventually(t, 10*time.Second, "member a's processes are gone", func() error {
			if left := proc.Tagged(proc.TagDir+"="+dir, proc.TagMember+"=a"); len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
		if len(proc.Tagged(proc.TagDir+"="+dir, proc.TagMember+"=b")) != 3 {
			t.Fatal("member b should be untouched")
		}

		// The --parent-pid process dies: member b's watchdog tears it down.
		parent.Process.Kill()
		parent.Wait()
		eventually(t, 60*time.Second, "member b's processes are gone after its parent died", func() error {
			if left := proc.Tagged(proc.TagDir + "=" + dir); len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
	})

	t.Run("lease not renewed", func(t *testing.T) {
		dir := newDir(t)
		run(t, "up", "--members", "1", "--out", dir, "--lease-timeout", "4s")
		for range 3 { // renewed: stays up
			time.Sleep(time.Second)
			run(t, "lease", "--out", dir)
		}
		if len(proc.Tagged(proc.TagDir+"="+dir)) != 3 {
			t.Fatal("member died although its lease was renewed")
		}
		eventually(t, 30*time.Second, "member torn down after its lease expired", func() error {
			if left := proc.Tagged(proc.TagDir + "=" + dir); len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
		var rows []env.StatusRow
		out := run(t, "status", "--out", dir, "--json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatal(err)
		}
		if rows[0].Running || rows[0].Phase != member.PhaseFailed || !strings.Contains(rows[0].Message, "lease file") {
			t.Errorf("status does not say why the member stopped: %+v", rows[0].MemberInfo)
		}
	})

	t.Run("orchestrator killed during start-up", func(t *testing.T) {
		dir := newDir(t)
		up := exec.Command(testenvBin, "up", "--members", "1", "--out", dir)
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until etcd runs and the apiserver is being started, then SIGKILL `up`.
		eventually(t, 30*time.Second, "kube-apiserver started", func() error {
			b, err := os.ReadFile(filepath.Join(dir, "member1", "state.json"))
			if err != nil || !strings.Contains(string(b), `"kube-apiserver"`) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		up.Process.Kill()
		up.Wait()
		eventually(t, 10*time.Second, "everything started by the killed `up` is gone", func() error {
			if left := proc.Tagged(proc.TagDir + "=" + dir); len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
	})
}

// TestControllerManagerAlone is the conformance recorder's member: `--nodes 0` runs
// kube-controller-manager (here only its garbage collector) without a scheduler, a fake kubelet
// or nodes, so pods stay as they were created while owners' dependents are collected.
func TestControllerManagerAlone(t *testing.T) {
	dir := newDir(t)
	run(t, "up", "--members", "1", "--with-workloads", "--controllers", "garbagecollector", "--nodes", "0",
		"--out", dir, "--parent-pid", strconv.Itoa(os.Getpid()))
	ready := readReady(t, dir)
	if got := len(proc.Tagged(proc.TagDir + "=" + dir)); got != 4 {
		t.Fatalf("want 4 processes (supervisor, etcd, kube-apiserver, kube-controller-manager), got %d: %v", got, proc.Tagged(proc.TagDir+"="+dir))
	}
	ctx := context.Background()
	cs := clientFor(t, ready.Members[0])
	if nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("nodes: %d %v", len(nodes.Items), err)
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:            "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the garbage collector deletes the dependent", func() error {
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "dependent", metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	got, err := cs.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != pod.ResourceVersion || got.Spec.NodeName != "" || len(got.Status.Conditions) != 0 {
		t.Errorf("the pod changed although nothing schedules or runs pods: node %q, conditions %v", got.Spec.NodeName, got.Status.Conditions)
	}
}
