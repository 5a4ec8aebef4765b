// Package provision is the Docker engine of the sandbox lifecycle: one
// internal network, two named volumes and one hardened agent container per
// sandbox, all named and labelled (lifecycle.Names.Labels) so they can be
// found again. It speaks Docker inside and the lifecycle's vocabulary
// (lifecycle.Container, Status, Event) outside; one file per operation.
package provision

import "github.com/affido/affido/manager/lifecycle"

// The Docker object names of a sandbox.

func ContainerName(n lifecycle.Names) string       { return n.Stack + "-" + n.Sandbox + "-agent" }
func NetworkName(n lifecycle.Names) string         { return n.Stack + "-" + n.Sandbox + "-net" }
func SessionVolumeName(n lifecycle.Names) string   { return n.Stack + "-" + n.Sandbox + "-session" }
func WorkspaceVolumeName(n lifecycle.Names) string { return n.Stack + "-" + n.Sandbox + "-workspace" }
