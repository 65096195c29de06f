package karmada

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// GVRs of the Karmada and Kubernetes kinds this package reads or writes by name.
var (
	ClusterGVR           = schema.GroupVersionResource{Group: "cluster.karmada.io", Version: "v1alpha1", Resource: "clusters"}
	PropagationPolicyGVR = schema.GroupVersionResource{Group: "policy.karmada.io", Version: "v1alpha1", Resource: "propagationpolicies"}
	ResourceBindingGVR   = schema.GroupVersionResource{Group: "work.karmada.io", Version: "v1alpha2", Resource: "resourcebindings"}
	apiServiceGVR        = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	crdGVR               = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// Client talks to karmada-apiserver with whatever kinds it serves.
type Client struct {
	Dynamic dynamic.Interface
	mapper  meta.ResettableRESTMapper
}

// NewClient builds a Client from a kubeconfig file.
func NewClient(kubeconfig string) (*Client, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return NewClientForConfig(rc)
}

// NewClientForConfig builds a Client from a rest.Config.
func NewClientForConfig(rc *rest.Config) (*Client, error) {
	rc = rest.CopyConfig(rc)
	if rc.Timeout == 0 {
		rc.Timeout = 15 * time.Second
	}
	// client-go's default 5 QPS would make joining a hundred members take a minute.
	rc.QPS, rc.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Client{Dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

// Apply creates each object, or replaces it if it exists (the second `testenv start` of a
// host finds them all).
func (c *Client) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			c.mapper.Reset()
			if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
			}
		}
		var ri dynamic.ResourceInterface = c.Dynamic.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = c.Dynamic.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = ri.Create(ctx, o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
				o = o.DeepCopy()
				o.SetResourceVersion(cur.GetResourceVersion())
				_, err = ri.Update(ctx, o, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// CRDsEstablished reports an error naming the CRDs not yet Established.
func (c *Client) CRDsEstablished(ctx context.Context, crds []*unstructured.Unstructured) error {
	var waiting []string
	for _, o := range crds {
		cur, err := c.Dynamic.Resource(crdGVR).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if conditionStatus(cur, "Established") != "True" {
			waiting = append(waiting, o.GetName())
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("CRDs not established yet: %s", strings.Join(waiting, ", "))
	}
	return nil
}

// APIServiceAvailable reports an error until the APIService is Available.
func (c *Client) APIServiceAvailable(ctx context.Context, name string) error {
	cur, err := c.Dynamic.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if s := conditionStatus(cur, "Available"); s != "True" {
		return fmt.Errorf("APIService %s is not Available (%s: %s)", name, s, conditionMessage(cur, "Available"))
	}
	return nil
}

// WebhookAnswers creates a PropagationPolicy as a dry run: karmada-apiserver calls the
// mutating and validating webhooks for it (both fail closed), so success means the webhook
// answers through the configuration, TLS included.
func (c *Client) WebhookAnswers(ctx context.Context) error {
	pp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.karmada.io/v1alpha1",
		"kind":       "PropagationPolicy",
		"metadata":   map[string]any{"name": "testenv-webhook-probe", "namespace": SystemNamespace},
		"spec": map[string]any{
			"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "testenv-webhook-probe"}},
		},
	}}
	out, err := c.Dynamic.Resource(PropagationPolicyGVR).Namespace(SystemNamespace).
		Create(ctx, pp, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run PropagationPolicy through the webhook: %w", err)
	}
	// The mutating webhook gives every policy its permanent id.
	if out.GetLabels()["propagationpolicy.karmada.io/permanent-id"] == "" {
		return fmt.Errorf("the mutating webhook did not label the dry-run PropagationPolicy (labels %v)", out.GetLabels())
	}
	return nil
}

// Member is a cluster to join: where its API server is, and the credentials Karmada keeps
// for it (`karmadactl join` obtains them from the member, see ObtainCredentials).
type Member struct {
	Name             string
	ID               string // the member's kube-system namespace UID
	Server           string
	CABundle         []byte
	Token            string
	ImpersonateToken string
}

// ObtainCredentials does in the member what `karmadactl join` does there (Karmada's
// pkg/util/credential.go, read not copied): namespace karmada-cluster labelled
// karmada.io/system=true; ServiceAccounts karmada-impersonator and karmada-<name>, the
// latter bound to ClusterRole karmada-controller-manager:karmada-<name> (every verb on every
// resource, GET on every non-resource URL); a service-account-token Secret for each, whose
// token Karmada then uses. kubeconfig is an administrator's kubeconfig of the member.
func ObtainCredentials(ctx context.Context, name, kubeconfig string) (Member, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return Member{}, err
	}
	rc.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Member{}, err
	}
	m := Member{Name: name, Server: rc.Host, CABundle: rc.CAData}
	if len(m.CABundle) == 0 && rc.CAFile != "" {
		if m.CABundle, err = os.ReadFile(rc.CAFile); err != nil {
			return Member{}, err
		}
	}
	fail := func(step string, err error) (Member, error) {
		return Member{}, fmt.Errorf("join %s: in the member: %s: %w", name, step, err)
	}
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err == nil {
		m.ID = string(ns.UID)
	}
	labels := map[string]string{"karmada.io/system": "true"}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ClusterNamespace, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail("namespace "+ClusterNamespace, err)
	}
	account := "karmada-" + name
	role := "karmada-controller-manager:" + account
	for _, sa := range []string{"karmada-impersonator", account} {
		obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ClusterNamespace, Labels: labels}}
		if _, err := cs.CoreV1().ServiceAccounts(ClusterNamespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fail("service account "+sa, err)
		}
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
	}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail("cluster role "+role, err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ClusterNamespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail("cluster role binding "+role, err)
	}
	for _, t := range []struct {
		sa  string
		out *string
	}{{"karmada-impersonator", &m.ImpersonateToken}, {account, &m.Token}} {
		token, err := serviceAccountToken(ctx, cs, t.sa)
		if err != nil {
			return fail("token of "+t.sa, err)
		}
		*t.out = token
	}
	return m, nil
}

// serviceAccountToken creates a kubernetes.io/service-account-token Secret named after the
// account (as karmadactl does) and waits up to 30 s for the token controller to fill it.
func serviceAccountToken(ctx context.Context, cs kubernetes.Interface, account string) (string, error) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: ClusterNamespace,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: account}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	if _, err := cs.CoreV1().Secrets(ClusterNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := cs.CoreV1().Secrets(ClusterNamespace).Get(ctx, account, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if t := cur.Data[corev1.ServiceAccountTokenKey]; len(t) > 0 {
			return string(t), nil
		}
		if time.Now().After(deadline) {
			return "", errors.New("the token controller did not fill the secret within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Join registers a member in Push mode as `karmadactl join` does on the control-plane side:
// Secrets karmada-cluster/<name> {token, caBundle} and <name>-impersonator {token}, and a
// Cluster with id, apiEndpoint, secretRef, impersonatorSecretRef and syncMode Push.
func (c *Client) Join(ctx context.Context, m Member) error {
	secret := func(name string, data map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Secret",
			"metadata":   map[string]any{"name": name, "namespace": ClusterNamespace},
			"stringData": data,
		}}
	}
	spec := map[string]any{
		"apiEndpoint":           m.Server,
		"syncMode":              "Push",
		"secretRef":             map[string]any{"namespace": ClusterNamespace, "name": m.Name},
		"impersonatorSecretRef": map[string]any{"namespace": ClusterNamespace, "name": m.Name + "-impersonator"},
	}
	if m.ID != "" {
		spec["id"] = m.ID
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.karmada.io/v1alpha1",
		"kind":       "Cluster",
		"metadata":   map[string]any{"name": m.Name},
		"spec":       spec,
	}}
	if err := c.Apply(ctx,
		secret(m.Name, map[string]any{"token": m.Token, "caBundle": string(m.CABundle)}),
		secret(m.Name+"-impersonator", map[string]any{"token": m.ImpersonateToken})); err != nil {
		return fmt.Errorf("join %s: %w", m.Name, err)
	}
	// Cluster is served by karmada-aggregated-apiserver, not a CRD: no discovery needed.
	_, err := c.Dynamic.Resource(ClusterGVR).Create(ctx, cluster, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("join %s: create Cluster: %w", m.Name, err)
	}
	return nil
}

// ClustersReady reports an error naming the clusters that are not Ready (with their
// condition's reason and message).
func (c *Client) ClustersReady(ctx context.Context, names []string) error {
	var waiting []string
	for _, n := range names {
		cur, err := c.Dynamic.Resource(ClusterGVR).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if conditionStatus(cur, "Ready") != "True" {
			waiting = append(waiting, fmt.Sprintf("%s (%s)", n, conditionMessage(cur, "Ready")))
		}
	}
	sort.Strings(waiting)
	if len(waiting) > 0 {
		return fmt.Errorf("clusters not Ready: %s", strings.Join(waiting, "; "))
	}
	return nil
}

func condition(o *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

func conditionStatus(o *unstructured.Unstructured, typ string) string {
	if c := condition(o, typ); c != nil {
		s, _ := c["status"].(string)
		return s
	}
	return "absent"
}

func conditionMessage(o *unstructured.Unstructured, typ string) string {
	if c := condition(o, typ); c != nil {
		r, _ := c["reason"].(string)
		m, _ := c["message"].(string)
		return strings.TrimSpace(r + " " + m)
	}
	return "no " + typ + " condition"
}
