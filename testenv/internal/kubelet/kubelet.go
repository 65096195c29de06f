// Package kubelet is testenv's fake kubelet: it registers fake Nodes, keeps them Ready with a
// Lease heartbeat, and plays the kubelet's part in a pod's life without running anything:
// a pod bound to one of its nodes becomes Running and Ready with a pod IP; a pod of a Job
// (restartPolicy Never/OnFailure) then succeeds after --job-pod-duration; a pod being deleted
// is finalised (deleted with grace 0, as the kubelet does once containers have stopped).
//
// It also serves the kubelet API of each node, so that kube-apiserver can answer pods/log
// and pods/exec: one HTTPS listener per node on the node's address (127.0.0.1, a port the
// kernel picks, reported in status.daemonEndpoints.kubeletEndpoint.port; a restarted fake
// kubelet gets new ports and re-reports them), with a self-signed certificate made at start.
// /containerLogs returns deterministic fake lines; /exec runs the command in a built-in
// shell-like responder (see shell) through the kubelet's own streaming server code
// (k8s.io/cri-streaming), so nothing is ever executed on the machine.
//
// It never dials a pod or node address (only the member's apiserver, and its own listeners
// for WebSocket translation): pod IPs are data only. A test that runs a real server for a pod
// (in a network namespace of its own) names its address with the annotation
// testenv.flotilla.io/pod-ip, which becomes the pod's IP instead of one allocated, and which
// /portForward dials for that pod (no other).
package kubelet

import (
	"context"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Labels set on every fake node besides the well-known ones.
const FakeNodeLabel = "testenv.flotilla.io/fake-node"

// Config of one fake kubelet process (one per member; it serves all of the member's nodes).
type Config struct {
	Kubeconfig     string
	Nodes          []string
	CPU            string
	Memory         string
	Pods           string
	Region         string
	Zones          []string
	PodCIDR        string
	NodeIP         string
	KubeletVersion string
	LeaseDuration  time.Duration
	JobPodDuration time.Duration
	Workers        int
}

type kubelet struct {
	cfg     Config
	cs      kubernetes.Interface
	nodes   map[string]bool
	servers map[string]*nodeServer
	pods    corelisters.PodLister
	queue   workqueue.TypedRateLimitingInterface[string]
	ipMu    sync.Mutex
	ipNet   *net.IPNet
	nextIP  uint64
	logf    func(string, ...any)
}

// Run registers the nodes and serves them until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = "127.0.0.1"
	}
	_, ipNet, err := net.ParseCIDR(cfg.PodCIDR)
	if err != nil || ipNet.IP.To4() == nil {
		return fmt.Errorf("--pod-cidr %q: want an IPv4 CIDR", cfg.PodCIDR)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "testenv-fake-kubelet"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	k := &kubelet{
		cfg: cfg, cs: cs, nodes: map[string]bool{}, ipNet: ipNet,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		logf: func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, "%s fake-kubelet: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(f, a...))
		},
	}
	for _, n := range cfg.Nodes {
		k.nodes[n] = true
	}
	defer k.queue.ShutDown()

	// The kubelet API listeners come first: each node's status reports its port.
	cert, roots, err := servingCert(cfg.NodeIP, cfg.Nodes)
	if err != nil {
		return err
	}
	k.servers = map[string]*nodeServer{}
	for _, n := range cfg.Nodes {
		s, err := newNodeServer(n, cfg.NodeIP, cert, roots, k.logf)
		if err != nil {
			return err
		}
		defer s.Close()
		k.servers[n] = s
		k.logf("node %s: kubelet API on https://%s", n, s.ln.Addr())
	}

	for i, n := range cfg.Nodes {
		zone := ""
		if len(cfg.Zones) > 0 {
			zone = cfg.Zones[i%len(cfg.Zones)]
		}
		if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			if err := k.registerNode(ctx, n, zone); err != nil {
				k.logf("register node %s: %v (retrying)", n, err)
				return false, nil
			}
			return true, nil
		}); err != nil {
			return err
		}
		k.logf("node %s registered (zone %q)", n, zone)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	podInf := factory.Core().V1().Pods()
	k.pods = podInf.Lister()
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			if tomb, ok2 := obj.(cache.DeletedFinalStateUnknown); ok2 {
				pod, ok = tomb.Obj.(*corev1.Pod)
			}
		}
		if ok && k.nodes[pod.Spec.NodeName] {
			key, _ := cache.MetaNamespaceKeyFunc(pod)
			k.queue.Add(key)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInf.Informer().HasSynced) {
		return ctx.Err()
	}
	k.seedIPs()

	var wg sync.WaitGroup
	for n, s := range k.servers {
		s.pods = k.pods
		wg.Go(func() {
			if err := s.Serve(ctx); err != nil {
				k.logf("kubelet API of %s: %v", n, err)
			}
		})
	}
	for range cfg.Workers {
		wg.Go(func() {
			for k.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { k.heartbeat(ctx) })
	<-ctx.Done()
	k.queue.ShutDown()
	wg.Wait()
	return nil
}

func (k *kubelet) registerNode(ctx context.Context, name, zone string) error {
	qty := func(s string) resource.Quantity { return resource.MustParse(s) }
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              qty(k.cfg.CPU),
		corev1.ResourceMemory:           qty(k.cfg.Memory),
		corev1.ResourcePods:             qty(k.cfg.Pods),
		corev1.ResourceEphemeralStorage: qty("100Gi"),
	}
	labels := map[string]string{
		corev1.LabelHostname:           name,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelInstanceTypeStable: "testenv-fake",
		FakeNodeLabel:                  "true",
	}
	if k.cfg.Region != "" {
		labels[corev1.LabelTopologyRegion] = k.cfg.Region
	}
	if zone != "" {
		labels[corev1.LabelTopologyZone] = zone
	}
	node, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = k.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status:     corev1.NodeStatus{Capacity: resources, Allocatable: resources},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	// The TaintNodesByCondition admission plugin taints new nodes not-ready; the node
	// lifecycle controller (off here) would lift it once the node reports Ready.
	changed := false
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			changed = true
			continue
		}
		taints = append(taints, t)
	}
	for key, v := range labels {
		if node.Labels[key] != v {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[key] = v
			changed = true
		}
	}
	if changed {
		node.Spec.Taints = taints
		if node, err = k.cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	node.Status = k.nodeStatus(resources, k.servers[name].Port())
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return k.renewLease(ctx, name)
}

func (k *kubelet) nodeStatus(resources corev1.ResourceList, kubeletPort int) corev1.NodeStatus {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "fake kubelet"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "fake kubelet"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "fake kubelet"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "testenv fake kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(kubeletPort)}},
		// As a 1.37 kubelet: kube-apiserver then passes WebSocket exec through to us.
		DeclaredFeatures: []string{ExtendWebSocketsToKubelet},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          k.cfg.KubeletVersion,
			OperatingSystem:         "linux",
			Architecture:            "amd64",
			ContainerRuntimeVersion: "testenv://fake",
			OSImage:                 "testenv fake node",
			KernelVersion:           "fake",
		},
	}
}

// heartbeat renews each node's Lease every LeaseDuration/4 and refreshes the Ready
// condition's heartbeat every LeaseDuration.
func (k *kubelet) heartbeat(ctx context.Context) {
	leaseTick := time.NewTicker(k.cfg.LeaseDuration / 4)
	defer leaseTick.Stop()
	statusEvery := 4
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-leaseTick.C:
		}
		for n := range k.nodes {
			if err := k.renewLease(ctx, n); err != nil && ctx.Err() == nil {
				k.logf("renew lease of %s: %v", n, err)
			}
			if i%statusEvery == 0 {
				k.touchReady(ctx, n)
			}
		}
	}
}

func (k *kubelet) touchReady(ctx context.Context, name string) {
	node, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	now := metav1.Now()
	for i := range node.Status.Conditions {
		node.Status.Conditions[i].LastHeartbeatTime = now
	}
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		k.logf("refresh status of %s: %v", name, err)
	}
}

func (k *kubelet) renewLease(ctx context.Context, node string) error {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(node),
				LeaseDurationSeconds: ptr.To(int32(k.cfg.LeaseDuration.Seconds())),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (k *kubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	requeue, err := k.syncPod(ctx, key)
	switch {
	case err != nil && ctx.Err() == nil:
		k.logf("sync pod %s: %v", key, err)
		k.queue.AddRateLimited(key)
	case requeue > 0:
		k.queue.Forget(key)
		k.queue.AddAfter(key, requeue)
	default:
		k.queue.Forget(key)
	}
	return true
}

// syncPod moves one pod on towards what a kubelet would report; it may ask to be called
// again after a delay.
func (k *kubelet) syncPod(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !k.nodes[pod.Spec.NodeName] {
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		// The containers "stopped" at once: finalise the deletion as the kubelet does.
		err := k.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil
		}
		return 0, err
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return 0, nil
	case corev1.PodRunning:
		if !isJobPod(pod) {
			if podReady(pod) {
				return 0, nil
			}
			break // Running but not Ready (e.g. status was reset): report again
		}
		runningFor := time.Duration(0)
		if pod.Status.StartTime != nil {
			runningFor = time.Since(pod.Status.StartTime.Time)
		}
		if runningFor < k.cfg.JobPodDuration {
			return k.cfg.JobPodDuration - runningFor + 10*time.Millisecond, nil
		}
		return 0, k.updateStatus(ctx, pod, k.succeededStatus(pod))
	}
	st, err := k.runningStatus(pod)
	if err != nil {
		return 0, err
	}
	if err := k.updateStatus(ctx, pod, st); err != nil {
		return 0, err
	}
	if isJobPod(pod) {
		return k.cfg.JobPodDuration + 10*time.Millisecond, nil
	}
	return 0, nil
}

func (k *kubelet) updateStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	p := pod.DeepCopy()
	p.Status = st
	_, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed under us: the informer brings the newer version back.
		return nil
	}
	return err
}

// PodIPAnnotation names the address a test's own server for the pod listens on.
const PodIPAnnotation = "testenv.flotilla.io/pod-ip"

func (k *kubelet) runningStatus(pod *corev1.Pod) (corev1.PodStatus, error) {
	now := metav1.Now()
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	st.HostIP = k.cfg.NodeIP
	st.HostIPs = []corev1.HostIP{{IP: k.cfg.NodeIP}}
	if st.PodIP == "" {
		if ip := net.ParseIP(pod.Annotations[PodIPAnnotation]); ip != nil && !pod.Spec.HostNetwork {
			st.PodIP = ip.String()
		} else if pod.Spec.HostNetwork {
			st.PodIP = k.cfg.NodeIP
		} else {
			ip, err := k.allocateIP()
			if err != nil {
				return st, err
			}
			st.PodIP = ip
		}
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.QOSClass = qosClass(pod)
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		setCondition(&st, t, now)
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "testenv://" + c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(pod, c.Name)}},
		})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "testenv://" + c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st, nil
}

func (k *kubelet) succeededStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodSucceeded
	for i := range st.Conditions {
		switch st.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers:
			st.Conditions[i].Status = corev1.ConditionFalse
			st.Conditions[i].Reason = "PodCompleted"
			st.Conditions[i].LastTransitionTime = now
		}
	}
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		started := now
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID}}
	}
	return st
}

func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != corev1.ConditionTrue {
				st.Conditions[i].Status = corev1.ConditionTrue
				st.Conditions[i].Reason, st.Conditions[i].Message = "", ""
				st.Conditions[i].LastTransitionTime = now
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isJobPod(pod *corev1.Pod) bool {
	if pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || pod.Spec.RestartPolicy == "" {
		return false
	}
	for _, o := range pod.OwnerReferences {
		if o.Kind == "Job" {
			return true
		}
	}
	return false
}

func containerID(pod *corev1.Pod, name string) string {
	uid := string(pod.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return "testenv://" + uid + "-" + name
}

// qosClass follows the kubelet's rules closely enough for scheduling tests.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests, limits, guaranteed := false, false, true
	for _, c := range pod.Spec.Containers {
		if len(c.Resources.Requests) > 0 {
			requests = true
		}
		if len(c.Resources.Limits) > 0 {
			limits = true
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			l, hasL := c.Resources.Limits[r]
			q, hasQ := c.Resources.Requests[r]
			if !hasL || (hasQ && q.Cmp(l) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !requests && !limits:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}

// seedIPs starts allocation after the highest pod IP already in use on our nodes, so a
// restarted kubelet does not hand out duplicates.
func (k *kubelet) seedIPs() {
	pods, _ := k.pods.List(labels.Everything())
	base := ipToInt(k.ipNet.IP)
	for _, p := range pods {
		if !k.nodes[p.Spec.NodeName] {
			continue
		}
		if ip := net.ParseIP(p.Status.PodIP); ip != nil && k.ipNet.Contains(ip) {
			if off := ipToInt(ip) - base; off >= k.nextIP {
				k.nextIP = off
			}
		}
	}
}

func (k *kubelet) allocateIP() (string, error) {
	k.ipMu.Lock()
	defer k.ipMu.Unlock()
	ones, bits := k.ipNet.Mask.Size()
	size := uint64(1) << uint(bits-ones)
	k.nextIP++
	if k.nextIP >= size-1 {
		k.nextIP = 1 // wrap; duplicates are possible only after 2^(32-prefix) pods
	}
	ip := intToIP(ipToInt(k.ipNet.IP) + k.nextIP)
	return ip.String(), nil
}

func ipToInt(ip net.IP) uint64 { return new(big.Int).SetBytes(ip.To4()).Uint64() }

func intToIP(n uint64) net.IP {
	return net.IPv4(byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// ParseList splits a comma-separated flag value, dropping empty items.
func ParseList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
