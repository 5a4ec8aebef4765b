package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

// adminStream sends body (may be nil) to the admin API as it is read and
// copies the 2xx answer to out, without a time limit.
func adminStream(method, path string, q url.Values, body io.Reader, out io.Writer) error {
	resp, err := adminDo(method, path, q, body, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		return fmt.Errorf("%s %s: the answer was cut short: %w", method, path, err)
	}
	return nil
}

// backupCmd writes USER's archive to a file: written beside it first and
// renamed into place only once the whole archive has arrived.
func backupCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "backup USER",
		Short: "Write USER's archive (agents' stores, data, workspace, manifest with SHA-256s) to a file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := args[0]
			if out == "" {
				out = fmt.Sprintf("affido-%s-%s.tar", user, time.Now().UTC().Format("20060102T150405Z"))
			}
			if out == "-" {
				return adminStream(http.MethodGet, "/admin/backup", url.Values{"user": {user}}, nil, cmd.OutOrStdout())
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), ".affido-backup-")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			err = adminStream(http.MethodGet, "/admin/backup", url.Values{"user": {user}}, nil, tmp)
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp.Name(), out)
			}
			if err != nil {
				return fmt.Errorf("back up %s: %w", user, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s\n", user, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", `the archive to write ("-": standard output; default affido-USER-TIME.tar)`)
	return cmd
}

// restoreCmd brings USER back from an archive.
func restoreCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "restore USER FILE",
		Short: "Bring USER back from an archive (\"-\": standard input); refused if tampered or partial",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := io.Reader(cmd.InOrStdin())
			if args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			q := url.Values{"user": {args[0]}}
			if force {
				q.Set("force", "1")
			}
			if err := adminStream(http.MethodPost, "/admin/restore", q, in, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("restore %s: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace the data USER's sandbox already has")
	return cmd
}

// migrateStorageCmd is `affido admin migrate-storage USER --to sqlite|postgres`.
func migrateStorageCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "migrate-storage USER --to sqlite|postgres",
		Short: "Move USER's agents' databases between SQLite files on their volume and their Postgres database (copied, every table checked)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{"user": {args[0]}, "to": {to}}
			if err := adminStream(http.MethodPost, "/admin/migrate-storage", q, nil, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("migrate the storage of %s: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "sqlite or postgres")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
