// Command probe plays an attacker inside a sandbox network. The e2e suite
// runs it on a user network, or inside a sandbox's network namespace.
//
//	probe ADDR...           try a TCP connection to each; print "ADDR open" or "ADDR closed <why>"
//	probe -get URL [TOKEN]  GET URL (with a bearer token); print the status code and body
//	probe -routes           print the IPv4 routing table (/proc/net/route): "default" for a default route
//	probe -sink ADDR        a notification sink: log every request as a JSON line; paths
//	                        starting /fail answer 500
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func sink(addr string) {
	enc := json.NewEncoder(os.Stdout)
	http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		enc.Encode(map[string]any{"at": time.Now().UTC().Format(time.RFC3339Nano), "path": r.URL.Path,
			"key": r.Header.Get("X-Affido-Notification"), "due": r.Header.Get("X-Affido-Due"), "body": string(b)})
		if strings.HasPrefix(r.URL.Path, "/fail") {
			http.Error(w, "failing on purpose", 500)
		}
	}))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-routes" {
		b, err := os.ReadFile("/proc/net/route")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			if f[1] == "00000000" {
				fmt.Printf("%s default via %s\n", f[0], f[2])
			} else {
				fmt.Printf("%s %s\n", f[0], f[1])
			}
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "-sink" {
		sink(os.Args[2])
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "-get" {
		req, err := http.NewRequest("GET", os.Args[2], nil)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if len(os.Args) > 3 {
			req.Header.Set("Authorization", "Bearer "+os.Args[3])
		}
		req.Header.Set("X-Affido-Source-Ip", "10.0.0.1") // a forged source address; Caddy must overwrite it
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, b)
		return
	}
	for _, addr := range os.Args[1:] {
		c, err := net.DialTimeout("tcp", addr, 1500*time.Millisecond)
		if err != nil {
			fmt.Printf("%s closed %v\n", addr, err)
			continue
		}
		c.Close()
		fmt.Printf("%s open\n", addr)
	}
}
