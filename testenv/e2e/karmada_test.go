package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla/flotilla/testenv/internal/karmada"
	"github.com/flotilla/flotilla/testenv/internal/member"
)

// flotillaBin finds the flotilla binary the Karmada smoke test runs simulated members with:
// $FLOTILLA_BIN, else $CARGO_TARGET_DIR/debug/flotilla, else the default target directory
// of scripts/test.sh. Without one the test is skipped, unless FLOTILLA_REQUIRE_KARMADA=1.
func flotillaBin(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("FLOTILLA_BIN")}
	if d := os.Getenv("CARGO_TARGET_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "debug", "flotilla"))
	}
	home, _ := os.UserHomeDir()
	candidates = append(candidates, filepath.Join(home, ".cache", "flotilla", "target", "debug", "flotilla"))
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c
		}
	}
	msg := fmt.Sprintf("no flotilla binary (tried %v); build it with `cargo build -p flotilla --bin flotilla` or set FLOTILLA_BIN", candidates[1:])
	if os.Getenv("FLOTILLA_REQUIRE_KARMADA") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startSimMembers runs `flotilla member --members n` until the test ends and returns the
// directory with the members' kubeconfigs.
func startSimMembers(t *testing.T, bin, dir string, n int) {
	t.Helper()
	cmd := exec.Command(bin, "member", "--members", strconv.Itoa(n), "--data-dir", dir)
	logFile, err := os.Create(filepath.Join(dir, "flotilla-member.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t0 := time.Now()
		defer func() { t.Logf("flotilla member stopped in %.1fs", time.Since(t0).Seconds()) }()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
		}
		ready <- fmt.Errorf("flotilla member exited before ready: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v; log:\n%s", err, member.Tail(logFile.Name(), 30))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("flotilla member: not ready after 60s; log:\n%s", member.Tail(logFile.Name(), 30))
	}
}

func kubeClient(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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

// smokeNamespace is created on the host only: Karmada's namespace controller must propagate it
// to every member before the Deployments can land there.
const smokeNamespace = "smoke"

func propagationPolicy(name string, resource string, placement map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.karmada.io/v1alpha1",
		"kind":       "PropagationPolicy",
		"metadata":   map[string]any{"name": name, "namespace": smokeNamespace},
		"spec": map[string]any{
			"resourceSelectors": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": resource}},
			"placement":         placement,
		},
	}}
}

func smokeDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: smokeNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
			},
		},
	}
}

// TestKarmadaSmoke brings up a real Karmada control plane (`testenv karmada up`), three
// Flotilla simulated members (`flotilla member`), joins them in Push mode, and propagates a
// Deployment Divided over two clusters by static weights and one Duplicated to all three:
// the copies, with the right replicas, must arrive in the members' own stores. It fails on
// errors, never on speed (the waits are generous; the timings are logged).
func TestKarmadaSmoke(t *testing.T) {
	flotilla := flotillaBin(t)
	dir := newDir(t)
	ctx := context.Background()
	t0 := time.Now()
	out := run(t, "karmada", "up", "--out", dir, "--parent-pid", strconv.Itoa(os.Getpid()))
	if strings.TrimSpace(out) != "ready" && !strings.HasSuffix(strings.TrimSpace(out), "\nready") {
		t.Fatalf("karmada up printed %q, want a last line 'ready'", out)
	}
	t.Logf("Karmada up in %.1fs", time.Since(t0).Seconds())

	pids, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range member.KarmadaComponents {
		found := false
		for _, line := range strings.Split(strings.TrimSpace(string(pids)), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[1] == name {
				pid, _ := strconv.Atoi(f[0])
				if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err != nil {
					t.Errorf("pids: %s (%d) is not running", name, pid)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("pids has no line for %s:\n%s", name, pids)
		}
	}

	members := filepath.Join(dir, "members")
	if err := os.MkdirAll(members, 0o755); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	startSimMembers(t, flotilla, members, 3)
	names := []string{"member1", "member2", "member3"}
	args := []string{"karmada", "join", "--out", dir, "--wait", "3m"}
	for _, n := range names {
		args = append(args, "--member", n+"="+filepath.Join(members, n+".kubeconfig"))
	}
	run(t, args...)
	t.Logf("3 simulated members started, joined and Ready in %.1fs", time.Since(t1).Seconds())

	host := kubeClient(t, filepath.Join(dir, "karmada.kubeconfig"))
	kc, err := karmada.NewClient(filepath.Join(dir, "karmada.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	pps := kc.Dynamic.Resource(karmada.PropagationPolicyGVR).Namespace(smokeNamespace)
	t2 := time.Now()
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: smokeNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pps.Create(ctx, propagationPolicy("divided", "divided", map[string]any{
		"clusterAffinity": map[string]any{"clusterNames": []any{"member1", "member2"}},
		"replicaScheduling": map[string]any{
			"replicaSchedulingType":     "Divided",
			"replicaDivisionPreference": "Weighted",
			"weightPreference": map[string]any{"staticWeightList": []any{
				map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1"}}, "weight": int64(1)},
				map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member2"}}, "weight": int64(2)},
			}},
		},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pps.Create(ctx, propagationPolicy("duplicated", "duplicated", map[string]any{
		"clusterAffinity":   map[string]any{"clusterNames": []any{"member1", "member2", "member3"}},
		"replicaScheduling": map[string]any{"replicaSchedulingType": "Duplicated"},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*appsv1.Deployment{smokeDeployment("divided", 6), smokeDeployment("duplicated", 3)} {
		if _, err := host.AppsV1().Deployments(smokeNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Expected copies in each member's own store: Divided 6 by weights 1:2 → 2 + 4 (none in
	// member3); Duplicated → 3 everywhere.
	want := map[string]map[string]int32{
		"member1": {"divided": 2, "duplicated": 3},
		"member2": {"divided": 4, "duplicated": 3},
		"member3": {"duplicated": 3},
	}
	for _, n := range names {
		cs := kubeClient(t, filepath.Join(members, n+".kubeconfig"))
		for name, replicas := range want[n] {
			eventually(t, 2*time.Minute, fmt.Sprintf("%s: Deployment %s with %d replicas", n, name, replicas), func() error {
				d, err := cs.AppsV1().Deployments(smokeNamespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
					return fmt.Errorf("replicas %v", d.Spec.Replicas)
				}
				if d.Labels["karmada.io/managed"] != "true" {
					return fmt.Errorf("not labelled karmada.io/managed=true: %v", d.Labels)
				}
				return nil
			})
		}
	}
	t.Logf("both Deployments in every target member after %.1fs", time.Since(t2).Seconds())
	if _, err := kubeClient(t, filepath.Join(members, "member3.kubeconfig")).AppsV1().Deployments(smokeNamespace).
		Get(ctx, "divided", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("member3 is not a target of 'divided', yet: %v", err)
	}
	// The status flows back: the template's status sums what the members report.
	eventually(t, 2*time.Minute, "the template 'duplicated' aggregates its members' status", func() error {
		d, err := host.AppsV1().Deployments(smokeNamespace).Get(ctx, "duplicated", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.Replicas != 9 {
			return fmt.Errorf("status.replicas %d, want 9 (3 members x 3)", d.Status.Replicas)
		}
		return nil
	})
	// Deleting a template deletes its copies (Work finalizers, the execution controller).
	t3 := time.Now()
	if err := host.AppsV1().Deployments(smokeNamespace).Delete(ctx, "divided", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"member1", "member2"} {
		cs := kubeClient(t, filepath.Join(members, n+".kubeconfig"))
		eventually(t, 2*time.Minute, n+": Deployment divided deleted", func() error {
			_, err := cs.AppsV1().Deployments(smokeNamespace).Get(ctx, "divided", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	t.Logf("deleted from the members after %.1fs", time.Since(t3).Seconds())
	t.Logf("smoke test done in %.1fs", time.Since(t0).Seconds())
}

// TestKarmadaWithoutControllers: `karmada up --without-controllers` leaves
// karmada-controller-manager and karmada-scheduler to the caller, whose command lines in
// DIR/karmada.json must start them as the supervisor would (healthy on the health URLs given).
func TestKarmadaWithoutControllers(t *testing.T) {
	dir := newDir(t)
	run(t, "karmada", "up", "--out", dir, "--without-controllers", "--parent-pid", strconv.Itoa(os.Getpid()))
	pids, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Split(strings.TrimSpace(string(pids)), "\n")); n != len(member.KarmadaComponents)-2 {
		t.Errorf("pids has %d lines, want %d:\n%s", n, len(member.KarmadaComponents)-2, pids)
	}
	b, err := os.ReadFile(filepath.Join(dir, "karmada.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum member.KarmadaSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if !sum.WithoutControllers {
		t.Error("karmada.json: withoutControllers is not set")
	}
	for _, name := range []string{member.KarmadaControllerManager, member.KarmadaScheduler} {
		if _, ok := sum.PIDs[name]; ok {
			t.Errorf("%s runs although --without-controllers", name)
		}
		argv := sum.Commands[name]
		if len(argv) < 2 {
			t.Fatalf("karmada.json: no command for %s", name)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		logFile, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logFile.Close() })
		eventually(t, time.Minute, name+" healthy at "+sum.Health[name], func() error {
			resp, err := http.Get(sum.Health[name])
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			return nil
		})
	}
}
