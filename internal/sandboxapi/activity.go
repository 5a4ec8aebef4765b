package sandboxapi

import "strings"

// passive lists the agent routes that never open storage. Requests to them
// wake a sandbox to answer but do not count as activity, so a health check
// polling every second cannot keep a sandbox from pausing.
var passive = map[string]bool{"health": true, "status": true, "ingest": true, "pause": true, "claim": true}

// passivePrefix lists the workspace file routes, which never activate.
var passivePrefix = []string{"uploads", "skills", "artifacts"}

// Activating reports whether a request to the agent path (after the
// /u/<user> prefix) counts as user activity.
func Activating(path string) bool {
	p := strings.Trim(path, "/")
	first, _, _ := strings.Cut(p, "/")
	if passive[first] && first == p {
		return false
	}
	for _, pre := range passivePrefix {
		if first == pre {
			return false
		}
	}
	return true
}
