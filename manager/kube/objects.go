package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/lifecycle"
)

// The object builders are pure: the same Config and Names give the same
// objects (testdata/*.golden).

func (c Config) meta(name string, n lifecycle.Names) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels(n),
		Annotations: map[string]string{AnnotationSandbox: n.Sandbox}}
}

// Pod is the sandbox's agent. Pod Security: it admits under "baseline", not
// "restricted": the agent starts as root holding CAP_SETUID and CAP_SETGID
// (and nothing else) to start its tool runner under the tools' uid and drop
// itself to the agent's (agent/privsep); "restricted" forbids both a root
// start and any added capability but NET_BIND_SERVICE. After start-up no
// process holds a capability; no_new_privs, a read-only root, seccomp
// RuntimeDefault, no service-account token and resource limits hold
// throughout. Before it, an init container holding CAP_CHOWN and
// CAP_FOWNER (both allowed by "baseline") gives fresh claims, which are
// root's, to the agent's uids (privsep.Own); Docker volumes get the
// image's ownership instead.
func (c Config) Pod(n lifecycle.Names) *corev1.Pod {
	c.defaults()
	root := int64(0)
	env := []corev1.EnvVar{}
	for _, kv := range sandboxapi.AgentEnv(c.AgentPort, c.GatewayURL, sandboxapi.Caller{KeyHash: c.CallerKeyHash}, c.Env) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	limits := corev1.ResourceList{}
	requests := corev1.ResourceList{}
	if c.MemoryBytes > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(c.MemoryBytes, resource.BinarySI)
		requests[corev1.ResourceMemory] = *resource.NewQuantity(c.MemoryBytes/4, resource.BinarySI)
	}
	if c.MilliCPU > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(c.MilliCPU, resource.DecimalSI)
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(c.MilliCPU/4, resource.DecimalSI)
	}
	noPrivs := func(add ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add},
		}
	}
	mounts := []corev1.VolumeMount{{Name: "session", MountPath: "/data"}, {Name: "workspace", MountPath: "/workspace"}}
	meta := c.meta(podName(n), n)
	meta.Labels[labelApp] = appAgent
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever, // a death is the lifecycle's to handle
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(c.GracePeriod),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      &root,
				RunAsGroup:     &root,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            "own-volumes",
				Image:           c.Image,
				ImagePullPolicy: corev1.PullPolicy(c.PullPolicy),
				Args:            []string{"own-volumes"},
				SecurityContext: noPrivs("CHOWN", "FOWNER"),
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				VolumeMounts:    mounts,
			}},
			Containers: []corev1.Container{{
				Name:            "agent",
				Image:           c.Image,
				ImagePullPolicy: corev1.PullPolicy(c.PullPolicy),
				Env:             env,
				Ports:           []corev1.ContainerPort{{Name: "agent", ContainerPort: int32(c.AgentPort), Protocol: corev1.ProtocolTCP}},
				SecurityContext: noPrivs("SETUID", "SETGID"),
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				VolumeMounts:    append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}),
			}},
			Volumes: []corev1.Volume{
				{Name: "session", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: sessionClaim(n)}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: workspaceClaim(n)}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("64Mi"))}}},
			},
		},
	}
	if c.GatewayIP.IsValid() {
		p.Spec.HostAliases = []corev1.HostAlias{{IP: c.GatewayIP.String(), Hostnames: []string{sandboxapi.GatewayAlias}}}
	}
	return p
}

// Claims are the sandbox's two volumes: the session (/data) and the
// workspace (/workspace).
func (c Config) Claims(n lifecycle.Names) []*corev1.PersistentVolumeClaim {
	c.defaults()
	var out []*corev1.PersistentVolumeClaim
	for _, name := range []string{sessionClaim(n), workspaceClaim(n)} {
		pvc := &corev1.PersistentVolumeClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: c.meta(name, n),
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.VolumeSize}},
			},
		}
		if c.StorageClass != "" {
			pvc.Spec.StorageClassName = ptr(c.StorageClass)
		}
		out = append(out, pvc)
	}
	return out
}

// Policy isolates the sandbox's Pod: in, only Caddy's Pods (in the control
// namespace) on the agent's port; out, only Caddy's Pods on the gateway
// port (the Pod resolves "gateway" from its hosts file, so it needs no
// DNS). It opens a hole in the sandbox namespace's default deny
// (deploy/kubernetes/policies.yaml) for one Pod; a Pod it does not select
// stays shut.
func (c Config) Policy(n lifecycle.Names) *netv1.NetworkPolicy {
	c.defaults()
	tcp := corev1.ProtocolTCP
	caddy := []netv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: c.ControlNamespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: c.CaddyLabels},
	}}
	return &netv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: c.meta(policyName(n), n),
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				lifecycle.LabelStack: n.Stack, lifecycle.LabelSandbox: key(n.Sandbox), labelApp: appAgent}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Ingress: []netv1.NetworkPolicyIngressRule{{
				From:  caddy,
				Ports: []netv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromInt32(int32(c.AgentPort)))}},
			}},
			Egress: []netv1.NetworkPolicyEgressRule{{
				To:    caddy,
				Ports: []netv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromInt32(int32(c.GatewayPort)))}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }
