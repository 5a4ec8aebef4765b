package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/affido/affido/manager/bench"
)

func benchCmd() *cobra.Command {
	cfg := bench.Config{Log: os.Stderr}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a running stack (./dev.sh bench): each path next to its floor, in one run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Out == "" {
				cfg.Out = fmt.Sprintf("bench-results/bench-%s.json", time.Now().UTC().Format("20060102-150405"))
			}
			_, err := bench.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "\nJSON: %s\n", cfg.Out)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "url", "http://127.0.0.1:18080", "Caddy's published address")
	f.StringVar(&cfg.Stack, "stack", envOr("AFFIDO_STACK", "affido"), "the stack's AFFIDO_STACK")
	f.StringVar(&cfg.Image, "image", "affido/agent:dev", "the agent image (for the floor)")
	f.IntVar(&cfg.Users, "users", 10, "cold provisions and resumes")
	f.IntVar(&cfg.Burst, "burst", 20, "new users at once (with the pool empty, and full)")
	f.IntVar(&cfg.SameUser, "same-user", 50, "concurrent first requests for one user")
	f.IntVar(&cfg.Warm, "warm", 300, "sequential warm requests per path")
	f.IntVar(&cfg.Concurrency, "concurrency", 8, "concurrent warm requests for requests/s")
	f.IntVar(&cfg.Prompts, "prompts", 30, "prompt round trips per kind")
	f.IntVar(&cfg.Lateness, "lateness", 5, "reminder and job lateness samples per idle tier (paused, stopped, removed, hung), quiet and with every core busy; 0 skips (about 5 minutes)")
	f.IntVar(&cfg.Density, "density", 0, "also bring the stack to N sandboxes at rest and measure memory, resume and networks there (slow: run once)")
	f.StringVar(&cfg.ProfileDir, "profile", "", "also write the manager's and Caddy's CPU, allocation, block and mutex profiles and traces of a pool claim, a resume and 1,000 warm requests to this directory")
	f.IntVar(&cfg.ProfileSeconds, "profile-seconds", 10, "the profile window")
	f.StringVar(&cfg.Out, "out", "", "JSON output (default bench-results/bench-<time>.json)")
	return cmd
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
