// Package cli is the affido command tree: the manager, its migrations and
// the operator's admin commands.
package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// Run executes the command line args (without the program name).
func Run(ctx context.Context, args []string) error {
	root := &cobra.Command{
		Use:           "affido",
		Short:         "Affido: a durable AI agent in a sandbox for every user",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(managerCmd(), adminCmd(), benchCmd(), marketplaceCmd())
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
