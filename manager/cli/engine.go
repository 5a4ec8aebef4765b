package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/config"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/provision"
)

// engine connects to the runtime cfg names (AFFIDO_RUNTIME) and returns
// it with the agent image's id (a pool from another image is retired) and
// what to call on the way out.
func engine(ctx context.Context, log *slog.Logger, cfg config.Config) (lifecycle.Engine, string, func(), error) {
	env := []string{"AFFIDO_MODEL=" + cfg.DefaultModel, fmt.Sprintf("AFFIDO_WORKSPACE_QUOTA_MB=%d", cfg.WorkspaceQuotaMB),
		"AFFIDO_BODY_TIMEOUT=" + cfg.BodyTimeout.String(),
		fmt.Sprintf("%s=%d", sandboxapi.EnvCompactTokens, cfg.CompactTokens), fmt.Sprintf("%s=%d", sandboxapi.EnvCompactHardCap, cfg.CompactHardCap),
		sandboxapi.EnvApprovalTTL + "=" + cfg.ApprovalTTL.String(), sandboxapi.EnvAgentStorage + "=" + cfg.AgentStorage}
	if cfg.Runtime == "kubernetes" {
		eng, err := kubeEngine(ctx, log, cfg, env)
		// A cluster pulls the image by its reference: that is its identity here.
		return eng, cfg.AgentImage, func() {}, err
	}
	docker, err := provision.NewDocker(provision.Config{
		Stack:            cfg.Stack,
		Image:            cfg.AgentImage,
		AgentPort:        8080,
		GatewayContainer: cfg.GatewayContainer,
		GatewayURL:       cfg.GatewayURL,
		MemoryBytes:      cfg.SandboxMemory,
		NanoCPUs:         int64(cfg.SandboxCPUs * 1e9),
		PidsLimit:        cfg.SandboxPids,
		Env:              env,
	})
	if err != nil {
		return nil, "", nil, err
	}
	fail := func(err error) (lifecycle.Engine, string, func(), error) { docker.Close(); return nil, "", nil, err }
	if err := waitFor(ctx, log, "docker", docker.Ping); err != nil {
		return fail(err)
	}
	if err := docker.CheckImage(ctx); err != nil {
		return fail(err)
	}
	imageID, err := docker.ImageID(ctx)
	if err != nil {
		return fail(err)
	}
	return docker, imageID, func() { docker.Close() }, nil
}

// kubeEngine connects to the cluster (AFFIDO_KUBECONFIG, or in-cluster)
// and finds the address of Caddy's gateway Service in the control
// namespace, which the sandbox Pods, in their own namespace, reach as
// "gateway" without DNS.
func kubeEngine(ctx context.Context, log *slog.Logger, cfg config.Config, env []string) (*kube.Engine, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kube.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if err := waitFor(ctx, log, "kubernetes", func(context.Context) error { _, err := cs.Discovery().ServerVersion(); return err }); err != nil {
		return nil, err
	}
	svc, err := cs.CoreV1().Services(cfg.Kube.Namespace).Get(ctx, cfg.Kube.GatewayService, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("gateway service %s/%s: %w", cfg.Kube.Namespace, cfg.Kube.GatewayService, err)
	}
	gw, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return nil, fmt.Errorf("gateway service %s has no cluster IP (%q)", svc.Name, svc.Spec.ClusterIP)
	}
	size, err := resource.ParseQuantity(cfg.Kube.VolumeSize)
	if err != nil {
		return nil, fmt.Errorf("AFFIDO_KUBE_VOLUME_SIZE: %w", err)
	}
	return kube.New(cs, kube.Config{
		Namespace:        cfg.Kube.SandboxNamespace,
		ControlNamespace: cfg.Kube.Namespace,
		Stack:            cfg.Stack,
		Image:            cfg.AgentImage,
		GatewayURL:       cfg.GatewayURL,
		GatewayIP:        gw,
		CallerKeyHash:    cfg.Kube.CallerKeyHash,
		MemoryBytes:      cfg.SandboxMemory,
		MilliCPU:         int64(cfg.SandboxCPUs * 1000),
		StorageClass:     cfg.Kube.StorageClass,
		VolumeSize:       size,
		Env:              env,
	})
}
