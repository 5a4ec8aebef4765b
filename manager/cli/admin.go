package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/affido/affido/internal/profiling"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/lifecycle"
)

// adminSocket is where the running manager's admin API listens.
func adminSocket() string {
	if v := os.Getenv("AFFIDO_ADMIN_SOCKET"); v != "" {
		return v
	}
	return "/run/affido/admin.sock"
}

// adminCall sends one request to the running manager's admin API, over its
// unix socket (it never listens on TCP), and decodes the answer into out
// (a *[]byte takes it as it is).
func adminCall(method, path string, q url.Values, out any) error {
	resp, err := adminDo(method, path, q, nil, 60*time.Second)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if raw, ok := out.(*[]byte); ok {
		*raw = body
		return nil
	}
	return json.Unmarshal(body, out)
}

// adminDo sends one request with body (may be nil) to the admin API and
// returns its 2xx answer, which the caller closes, or the error of
// another, with the problem's detail. timeout 0 is none (archives).
func adminDo(method, path string, q url.Values, body io.Reader, timeout time.Duration) (*http.Response, error) {
	u := "http://admin" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return nil, err
	}
	sock := adminSocket()
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the manager's admin API at %s (run this inside the manager container: docker exec <manager> affido admin ...): %w", sock, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var p struct {
		Detail    string
		RequestID string `json:"request_id"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p)
	if p.RequestID != "" {
		p.Detail += " (request id " + p.RequestID + ")"
	}
	return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, p.Detail)
}

func adminCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Operate the running manager (sandboxes, tokens)"}
	userCmd := func(use, short, path string, print func(cmd *cobra.Command, m map[string]string)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " USER",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var m map[string]string
				if err := adminCall(http.MethodPost, path, url.Values{"user": {args[0]}}, &m); err != nil {
					return err
				}
				print(cmd, m)
				return nil
			},
		}
	}
	done := func(verb string) func(*cobra.Command, map[string]string) {
		return func(cmd *cobra.Command, m map[string]string) {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb, m["user"])
		}
	}
	cmd.AddCommand(
		sandboxesCmd(),
		metricsCmd(),
		profileCmd(),
		poolCmd(),
		&cobra.Command{
			Use:   "capacity MAX",
			Short: "Let at most MAX sandboxes run at once (0: no limit) until the manager restarts",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var m map[string]any
				if err := adminCall(http.MethodPost, "/admin/capacity", url.Values{"max": {args[0]}}, &m); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "at most %v sandboxes run at once\n", m["max_running"])
				return nil
			},
		},
		evictCmd(),
		userCmd("reset", "Remove USER's container, network, volumes and registry row", "/admin/reset", done("reset")),
		userCmd("token", "Create USER if needed and print a new API token", "/admin/token",
			func(cmd *cobra.Command, m map[string]string) { fmt.Fprintln(cmd.OutOrStdout(), m["token"]) }),
		backupCmd(),
		migrateStorageCmd(),
		restoreCmd(),
		spendCmd(),
		inviteCmd(),
		passwordCmd(),
		&cobra.Command{
			Use:   "notify USER URL",
			Short: "Send USER's notifications (reminders) to an ntfy-compatible URL (\"\" for none)",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				var m map[string]string
				if err := adminCall(http.MethodPost, "/admin/notify", url.Values{"user": {args[0]}, "url": {args[1]}}, &m); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "notifications of %s go to %q\n", args[0], args[1])
				return nil
			},
		},
		&cobra.Command{
			Use:   "session USER TOKEN",
			Short: "Create USER if needed and store TOKEN as a 30-day web session",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				var m map[string]string
				if err := adminCall(http.MethodPost, "/admin/session", url.Values{"user": {args[0]}, "token": {args[1]}}, &m); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "session stored for %s\n", m["user"])
				return nil
			},
		},
	)
	return cmd
}

// metricsCmd prints the manager's Prometheus metrics. They are served on
// the admin socket only: nothing on a network, the host's bridge address
// included, reads them.
func metricsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "metrics",
		Short: "Print the manager's metrics (Prometheus text format)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body []byte
			if err := adminCall(http.MethodGet, "/admin/metrics", nil, &body); err != nil {
				return err
			}
			_, err := cmd.OutOrStdout().Write(body)
			return err
		},
	}
}

// profileCmd writes one of the manager's Go profiles, taken over the next
// --seconds, to stdout (affido bench --profile reads it through docker exec).
func profileCmd() *cobra.Command {
	var seconds int
	cmd := &cobra.Command{
		Use:       "profile " + strings.Join(profiling.Kinds, "|"),
		Short:     "Write the manager's CPU, allocation, block or mutex profile, or a trace, over the next --seconds to stdout",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: profiling.Kinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := adminDo(http.MethodGet, "/admin/profile/"+args[0], url.Values{"seconds": {strconv.Itoa(seconds)}}, nil,
				time.Duration(seconds)*time.Second+30*time.Second)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(cmd.OutOrStdout(), resp.Body); err != nil {
				return fmt.Errorf("read the %s profile: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&seconds, "seconds", 10, fmt.Sprintf("the window (1 to %d)", profiling.MaxSeconds))
	return cmd
}

// sandboxesCmd lists the sandboxes, as a table or (--json) as the admin
// API's JSON, unchanged (the bench waits on its reported_wake_at).
func sandboxesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sandboxes",
		Short: "List sandboxes (users' and the warm pool's): user, name, state, last activity",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var raw []byte
			if err := adminCall(http.MethodGet, "/admin/sandboxes", nil, &raw); err != nil {
				return err
			}
			if asJSON { // the admin API's JSON as it is, indented
				var out bytes.Buffer
				if err := json.Indent(&out, raw, "", "  "); err != nil {
					return fmt.Errorf("the admin API answered %q: %w", raw, err)
				}
				out.WriteByte('\n')
				_, err := cmd.OutOrStdout().Write(out.Bytes())
				return err
			}
			var list []lifecycle.Sandbox
			if err := json.Unmarshal(raw, &list); err != nil {
				return fmt.Errorf("the admin API answered %q: %w", raw, err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tNAME\tSTATE\tSUBNET\tLAST ACTIVE\tWAKE AT\tREPORTED WAKE")
			at := func(t *time.Time) string {
				if t == nil || t.IsZero() {
					return "-"
				}
				return t.UTC().Format(time.RFC3339)
			}
			for _, s := range list {
				user := s.User
				if user == "" {
					user = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", user, s.Name, s.State, s.Subnet, at(&s.LastActive), at(s.WakeAt), at(s.ReportedWakeAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// poolCmd sizes and drains the warm pool.
func poolCmd() *cobra.Command {
	var size int
	var drain bool
	cmd := &cobra.Command{
		Use:   "pool [--size N] [--drain]",
		Short: "Show the warm pool; --size N keeps N unclaimed sandboxes ready (until the manager restarts); --drain rebuilds them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size < 0 && !drain {
				var m map[string]int
				if err := adminCall(http.MethodGet, "/admin/pool", nil, &m); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "warm pool: %d sandboxes, %d ready\n", m["size"], m["ready"])
				return nil
			}
			q := url.Values{"size": {strconv.Itoa(size)}}
			if drain {
				q.Set("drain", "1")
			}
			var m map[string]any
			if err := adminCall(http.MethodPost, "/admin/pool", q, &m); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "warm pool: %v sandboxes", m["size"])
			if drain {
				fmt.Fprint(cmd.OutOrStdout(), ", drained and rebuilt")
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().IntVar(&size, "size", -1, "how many unclaimed sandboxes to keep ready (default: keep the size)")
	cmd.Flags().BoolVar(&drain, "drain", false, "retire the ready ones first (a new agent image)")
	return cmd
}

// spendCmd shows USER's spend and limits, and sets their own limits.
func spendCmd() *cobra.Command {
	var daily, monthly string
	cmd := &cobra.Command{
		Use:   "spend USER [--daily USD] [--monthly USD]",
		Short: "Show USER's spend today and this month; with flags, set their own limits",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{"user": {args[0]}}
			if daily != "" {
				q.Set("daily", daily)
			}
			if monthly != "" {
				q.Set("monthly", monthly)
			}
			var rep map[string]any
			if err := adminCall(http.MethodPost, "/admin/spend", q, &rep); err != nil {
				return err
			}
			b, _ := json.MarshalIndent(rep, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	cmd.Flags().StringVar(&daily, "daily", "", "USER's daily limit in USD")
	cmd.Flags().StringVar(&monthly, "monthly", "", "USER's monthly limit in USD")
	return cmd
}

// inviteCmd prints an invite code with which USER signs up in the web
// client (POST /auth/sign-up with the code), once, before it expires.
func inviteCmd() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "invite USER [--ttl 72h]",
		Short: "Print an invite code for USER to sign up in the web client",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m map[string]string
			if err := adminCall(http.MethodPost, "/admin/invite", url.Values{"user": {args[0]}, "ttl": {ttl}}, &m); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), m["invite"])
			return nil
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "72h", "how long the invite is valid")
	return cmd
}

// passwordCmd sets USER's password (creating USER if needed) from the
// first line of standard input; it is hashed here, before it is sent.
func passwordCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "password USER < password",
		Short: "Create USER if needed and set their web client password (read from standard input)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return fmt.Errorf("read the password from standard input: %w", err)
			}
			hash, err := account.Hash(strings.TrimRight(line, "\r\n"), account.DefaultParams)
			if err != nil {
				return err
			}
			var m map[string]string
			if err := adminCall(http.MethodPost, "/admin/password", url.Values{"user": {args[0]}, "hash": {hash}}, &m); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "password set for %s\n", args[0])
			return nil
		},
	}
}

// evictCmd takes a user's sandbox down now, to the removed tier or, with
// --to, to paused or stopped; its agent's next due time is stored first.
func evictCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "evict USER [--to paused|stopped|removed]",
		Short: "Remove USER's container now (or pause or stop it with --to); keep network and volumes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m map[string]string
			if err := adminCall(http.MethodPost, "/admin/evict", url.Values{"user": {args[0]}, "to": {to}}, &m); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "evicted %s (%s)\n", m["user"], to)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "removed", "the tier to take it to: paused, stopped or removed")
	return cmd
}
