package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/affido/affido/marketplace"
)

func marketplaceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "marketplace", Short: "Build the skills marketplace"}
	var src, out string
	build := &cobra.Command{
		Use:   "build",
		Short: "Write a manifest (files, sizes, sha256, h1: digest) per skill version, and an index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			idx, err := marketplace.Build(src, out)
			if err != nil {
				return err
			}
			for _, s := range idx.Skills {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %v\n", s.Name, s.Versions)
			}
			return nil
		},
	}
	build.Flags().StringVar(&src, "src", "marketplace/skills", "skills, as <name>/<version>/SKILL.md ...")
	build.Flags().StringVar(&out, "out", ".build/marketplace", "where to write manifests, files and index.json")
	cmd.AddCommand(build)
	return cmd
}
