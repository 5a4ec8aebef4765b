// Command affido-browser is the main process of a user's browser sandbox
// ("run") and the bridge the manager starts in it ("bridge").
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/affido/affido/browserbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd := append(os.Args[1:], "")[0]; cmd {
	case "run":
		chromium := os.Getenv("AFFIDO_CHROMIUM")
		if chromium == "" {
			chromium = "/usr/lib/chromium/chromium"
		}
		err = browserbox.Run(ctx, browserbox.Config{Chromium: chromium})
	case "bridge":
		err = browserbox.Bridge(os.Stdin, os.Stdout)
	default:
		err = fmt.Errorf("usage: affido-browser run|bridge (not %q)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "affido-browser:", err)
		os.Exit(1)
	}
}
