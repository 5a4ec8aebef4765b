// Command affido-caddy is Caddy with the standard modules and Affido's own
// (sandbox upstream, control key, profiles, resolve). What the binary contains is
// chosen by imports.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/affido/affido/caddy/controlkey"
	_ "github.com/affido/affido/caddy/profile"
	_ "github.com/affido/affido/caddy/resolve"
	_ "github.com/affido/affido/caddy/sandboxupstream"
)

func main() { caddycmd.Main() }
